import { spawnSync } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import pg from 'pg'
import t from 'tap'
import { projectRoot } from '../lib/project-root.js'
import { DEV_BUILD } from '../dev/tools/service-process.js'
import { TEST_DATABASE_URL } from './helpers/app.js'
import { SHARED_REDIS } from './helpers/made.js'

// What a test makes on the shared Redis and PostgreSQL is removed when it ends: every key under a
// prefix of testKeyPrefix() (test/helpers/made.ts), every schema of testSchemaUrl().

t.test('no test makes a key prefix of its own on the shared Redis: it takes one from testKeyPrefix()', async (t) => {
  const own = /REDIS_KEY_PREFIX: ['`]|`test:\$\{/
  const files = readdirSync(join(projectRoot, 'test'), { recursive: true, encoding: 'utf8' })
    .map((path) => join('test', path)).filter((file) => file.endsWith('.ts') && file !== join('test', 'helpers', 'made.ts') && file !== join('test', 'leftovers.test.ts'))
  t.ok(files.length > 50, `${files.length} files read`)
  t.strictSame(files.filter((file) => own.test(readFileSync(join(projectRoot, file), 'utf8'))), [])
})

t.test('a test file that built an app and wrote a key without expiry leaves neither the key nor its schema behind', async (t) => {
  // A planted test file beside the build, where it resolves `tap` and the helpers as the real ones do.
  const planted = join(DEV_BUILD, `.planted-leftovers-${process.pid}`)
  mkdirSync(planted, { recursive: true })
  t.teardown(() => rmSync(planted, { recursive: true, force: true }))
  writeFileSync(join(planted, 'makes.test.js'), `import t from 'tap'
import { buildTestApp } from '../test/helpers/app.js'
t.test('makes a key and a schema', async (t) => {
  const app = await buildTestApp(t)
  await app.redis.set(app.config.REDIS_KEY_PREFIX + 'planted', 'no expiry')
  const { rows } = await app.pg.query('SELECT current_schema() AS schema')
  console.log('# made ' + app.config.REDIS_KEY_PREFIX + ' ' + rows[0].schema)
})
`)
  const run = spawnSync(process.execPath, [join(planted, 'makes.test.js')], { cwd: projectRoot, encoding: 'utf8', timeout: 120_000 })
  t.equal(run.status, 0, 'the planted file passes', { output: run.stdout + run.stderr })
  const [, prefix = '', schema = ''] = /^\s*# made (\S+) (\S+)$/m.exec(run.stdout) ?? []
  t.match(prefix, /^test:[\w.-]+:[0-9a-f-]{36}:$/, 'its app had a key prefix of its own, naming its file')
  t.match(schema, /^test_[0-9a-f]{32}$/, 'and a schema of its own')

  const redis = new Redis(SHARED_REDIS)
  t.teardown(() => redis.disconnect())
  const [, keys] = await redis.scan('0', 'MATCH', `${prefix}*`, 'COUNT', 100_000)
  t.strictSame(keys, [], 'no key under its prefix is left')
  const database = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await database.connect()
  t.teardown(() => database.end())
  t.equal((await database.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount, 0, 'its schema is dropped')
})

import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, ensureTestDatabase, startTestSandbox, tempDir, testEnv, testSchemaUrl } from '../../helpers/app.js'
import { PrivateRedis } from '../../helpers/private-redis.js'
import { runServer } from '../../helpers/service-process.js'

// The start-up check of what Redis keeps. A PrivateRedis keeps nothing across a restart
// (--appendonly no --save ''), unless persistent (append-only file); each may be told to evict.

async function privateRedis (t: Test, { persistent, evicting }: { persistent: boolean, evicting: boolean }): Promise<PrivateRedis> {
  const redis = await PrivateRedis.start({ persistent })
  t.teardown(() => redis.kill())
  if (evicting) await redis.client(t).config('SET', 'maxmemory-policy', 'allkeys-lru')
  return redis
}

/**
 * BullMQ's own warning of an evicting Redis, which it writes with console.warn once its connections
 * are up (perhaps after the app closed): held for the rest of the test, not printed.
 */
function holdConsoleWarnings (t: Test): void {
  t.capture(console, 'warn')
}

async function startError (t: Test, overrides: Record<string, string>): Promise<string> {
  const error = await buildTestApp(t, overrides).then(() => undefined, (error: unknown) => error)
  return error instanceof Error ? error.message : `no error: ${String(error)}`
}

/** Builds the app, closes it, and returns the messages it logged at warn. */
async function warningsOfStart (t: Test, overrides: Record<string, string>): Promise<string[]> {
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { ...overrides, LOG_DIR: logDir })
  await app.close()
  return readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean)
    .map((line) => JSON.parse(line) as { level: number, message: string })
    .filter((line) => line.level === 40)
    .map((line) => line.message)
}

t.test('production refuses a Redis that may evict keys, naming maxmemory-policy; REDIS_ALLOW_VOLATILE=true starts with a warning', async (t) => {
  const redis = await privateRedis(t, { persistent: true, evicting: true })
  const production = { NODE_ENV: 'production', REDIS_URL: redis.url }

  const message = await startError(t, production)
  t.match(message, /^Redis may evict keys: maxmemory-policy is allkeys-lru, .*set maxmemory-policy noeviction\. REDIS_ALLOW_VOLATILE=true starts the service anyway$/)
  t.notMatch(message, /appendonly/, 'its append-only file is not blamed')

  holdConsoleWarnings(t)
  const warnings = await warningsOfStart(t, { ...production, REDIS_ALLOW_VOLATILE: 'true' })
  t.equal(warnings.length, 1, 'accepted: one warning')
  t.match(warnings[0], /^Redis may evict keys: maxmemory-policy is allkeys-lru/)
})

t.test('production refuses a Redis that keeps nothing across a restart, naming appendonly and save', async (t) => {
  const redis = await privateRedis(t, { persistent: false, evicting: false })
  const message = await startError(t, { NODE_ENV: 'production', REDIS_URL: redis.url })
  t.match(message, /^Redis keeps nothing across a restart: appendonly is no and save is empty, .*set appendonly yes\. REDIS_ALLOW_VOLATILE=true/)
  t.notMatch(message, /maxmemory-policy/)
})

t.test('outside production both are warnings only', async (t) => {
  const redis = await privateRedis(t, { persistent: false, evicting: true })
  holdConsoleWarnings(t)
  const warnings = await warningsOfStart(t, { NODE_ENV: 'test', REDIS_URL: redis.url })
  t.ok(warnings.some((message) => message.startsWith('Redis may evict keys: maxmemory-policy is allkeys-lru')), 'the eviction policy')
  t.ok(warnings.some((message) => message.startsWith('Redis keeps nothing across a restart')), 'the missing persistence')
})

t.test('CONFIG refused, as managed Redis services do: a warning that it could not be checked, and production starts', async (t) => {
  const redis = await privateRedis(t, { persistent: false, evicting: false })
  await redis.client(t).acl('SETUSER', 'default', '-config')
  const warnings = await warningsOfStart(t, { NODE_ENV: 'production', REDIS_URL: redis.url })
  t.equal(warnings.length, 1)
  t.match(warnings[0], /^could not check what Redis keeps \(CONFIG GET refused\)/)
})

t.test('the server refuses with one line, as for any start-up failure', async (t) => {
  const redis = await privateRedis(t, { persistent: true, evicting: true })
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const server = runServer(testEnv({ ...sandbox.settings, NODE_ENV: 'production', REDIS_URL: redis.url, DATABASE_URL: await testSchemaUrl(t) }))
  t.not(await server.exit, 0)
  t.match(server.stderr(), /^Startup failed: Redis may evict keys: maxmemory-policy is allkeys-lru, [^\n]*\n$/)
})

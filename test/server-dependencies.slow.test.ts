import t, { type Test } from 'tap'
import pg from 'pg'
import { build } from '../app.js'
import { ensureTestDatabase, startTestSandbox, testConfig, testEnv } from './helpers/app.js'
import { freePort } from './helpers/ports.js'
import { runServer } from './helpers/service-process.js'
import { PrivatePostgres } from './helpers/private-postgres.js'
import { skipWithout } from './helpers/packages.js'
import { PrivatePgBouncer } from './helpers/private-pgbouncer.js'

// The bound the acceptance of a failed start sets: an orchestrator restarting the process, or a
// developer reading the message, does not wait on a dependency that is not there.
const START_BOUND_MS = 5000

/** How the service's start fails with these settings, and how long it took (the process's own start not counted). */
async function failedStart (t: Test, overrides: Record<string, string>): Promise<{ message: string, elapsedMs: number }> {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const config = testConfig({ ...sandbox.settings, ...overrides })
  const started = performance.now()
  const error = await build({ config, logToStdout: false }).then((app) => app.close().then(() => undefined), (error: unknown) => error)
  const elapsedMs = performance.now() - started
  if (!(error instanceof Error)) throw new Error('the start did not fail')
  return { message: error.message, elapsedMs }
}

t.test('PostgreSQL refused at start: the start fails within the bound, naming the address without its credentials, the setting and the cause', async (t) => {
  const port = await freePort()
  const { message, elapsedMs } = await failedStart(t, { DATABASE_URL: `postgres://portal:s3cretpw@127.0.0.1:${port}/portal` })
  t.equal(message, `PostgreSQL at 127.0.0.1:${port}/portal (DATABASE_URL) cannot be reached: connect ECONNREFUSED 127.0.0.1:${port}`)
  t.ok(elapsedMs < START_BOUND_MS, `failed in ${Math.round(elapsedMs)} ms`)
})

t.test('Redis refused at start: the start fails within the bound, naming the address without its credentials, the setting and the cause', async (t) => {
  const port = await freePort()
  const { message, elapsedMs } = await failedStart(t, { REDIS_URL: `redis://:s3cretpw@127.0.0.1:${port}` })
  t.equal(message, `Redis at 127.0.0.1:${port} (REDIS_URL) cannot be reached within 3 s: connect ECONNREFUSED 127.0.0.1:${port}`)
  t.ok(elapsedMs < START_BOUND_MS, `failed in ${Math.round(elapsedMs)} ms`)
})

t.test('the process: exit 1 with one line saying so, no stack trace, no credentials', async (t) => {
  await ensureTestDatabase()
  const port = await freePort()
  for (const [setting, url, where] of [
    ['DATABASE_URL', `postgres://postgres:s3cretpw@127.0.0.1:${port}/postgres`, `PostgreSQL at 127.0.0.1:${port}/postgres (DATABASE_URL)`],
    ['REDIS_URL', `redis://:s3cretpw@127.0.0.1:${port}`, `Redis at 127.0.0.1:${port} (REDIS_URL)`]
  ] as const) {
    const server = runServer(testEnv({ [setting]: url }))
    t.teardown(() => { server.child.kill('SIGKILL') })
    t.equal(await server.exit, 1, `${setting}: exit 1`)
    t.match(server.stderr(), new RegExp(`^Startup failed: ${where.replace(/[().]/g, '\\$&')} cannot be reached[^\\n]*ECONNREFUSED`, 'm'), `${setting}: one line naming it`)
    t.notMatch(server.stderr(), /s3cretpw|at .*\.ts:\d+/, `${setting}: no credentials, no stack trace`)
  }
})

t.test('PostgreSQL that does not answer at start: the start fails within DATABASE_CONNECT_TIMEOUT_MS and a few seconds, naming PostgreSQL and DATABASE_URL', { skip: skipWithout(['pgbouncer']) }, async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const bouncer = await PrivatePgBouncer.start({ database: 'postgres', poolSize: 2, server: cluster.url })
  t.teardown(() => bouncer.stop())
  const connectTimeoutMs = 1000
  const where = (url: string) => `PostgreSQL at 127.0.0.1:${new URL(url).port}/postgres (DATABASE_URL) cannot be reached`

  cluster.hang()
  const stalled = await failedStart(t, { DATABASE_URL: cluster.url, DATABASE_CONNECT_TIMEOUT_MS: String(connectTimeoutMs) })
  t.match(stalled.message, where(cluster.url), `stopped backends: ${stalled.message}`)
  t.ok(stalled.elapsedMs < connectTimeoutMs + START_BOUND_MS, `failed in ${Math.round(stalled.elapsedMs)} ms`)
  const behindBouncer = await failedStart(t, { DATABASE_URL: bouncer.url, DATABASE_CONNECT_TIMEOUT_MS: String(connectTimeoutMs) })
  t.match(behindBouncer.message, where(bouncer.url), `stopped backends behind PgBouncer, whose connect succeeds: ${behindBouncer.message}`)
  t.ok(behindBouncer.elapsedMs < connectTimeoutMs + START_BOUND_MS, `failed in ${Math.round(behindBouncer.elapsedMs)} ms`)
  cluster.resume()

  await bouncer.pause()
  t.teardown(() => bouncer.resume().catch(() => {}))
  const server = runServer(testEnv({ DATABASE_URL: bouncer.url, DATABASE_CONNECT_TIMEOUT_MS: String(connectTimeoutMs) }))
  t.teardown(() => { server.child.kill('SIGKILL') })
  t.equal(await server.exit, 1, 'PgBouncer PAUSEd: exit 1')
  t.match(server.stderr(), new RegExp(`^Startup failed: ${where(bouncer.url).replace(/[().]/g, '\\$&')}`, 'm'), 'one line naming PostgreSQL and DATABASE_URL')
})

t.test('another instance migrating: the start waits for it within DATABASE_MIGRATION_TIMEOUT_MS, and fails past it naming the setting', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  // The lock the migration step takes, held as another instance's migration would hold it.
  const other = new pg.Client({ connectionString: cluster.url })
  other.on('error', () => {})
  await other.connect()
  t.teardown(() => other.end())
  await other.query('BEGIN')
  await other.query('SELECT pg_advisory_xact_lock(4242001)')

  const { message } = await failedStart(t, { DATABASE_URL: cluster.url, DATABASE_MIGRATION_TIMEOUT_MS: '1000' })
  t.equal(message, `PostgreSQL at 127.0.0.1:${cluster.port}/postgres (DATABASE_URL) could not be migrated: another instance's migration held the migration lock longer than DATABASE_MIGRATION_TIMEOUT_MS`)

  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const starting = build({ config: testConfig({ ...sandbox.settings, DATABASE_URL: cluster.url, DATABASE_MIGRATION_TIMEOUT_MS: '60000' }), logToStdout: false })
  await new Promise((resolve) => setTimeout(resolve, 1000))
  await other.query('COMMIT')
  const app = await starting
  t.teardown(() => app.close())
  t.equal((await app.inject('/health')).json().checks.database, 'ok', 'started once the other migration ended')
})

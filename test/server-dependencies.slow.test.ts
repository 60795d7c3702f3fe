import t, { type Test } from 'tap'
import { build } from '../app.js'
import { ensureTestDatabase, startTestSandbox, testConfig, testEnv } from './helpers/app.js'
import { freePort } from './helpers/ports.js'
import { runServer } from './helpers/service-process.js'

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

import t from 'tap'
import { build } from '../../app.js'
import { ensureTestDatabase, startTestSandbox, testConfig } from '../helpers/app.js'
import { PrivateRedis } from '../helpers/private-redis.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'

// With Redis hung, closing first learns so (one command timeout), then forces the job queue's close.
const CLOSE_BOUND_MS = 4000

async function timedClose (app: Awaited<ReturnType<typeof build>>): Promise<number> {
  const started = performance.now()
  await app.close()
  return performance.now() - started
}

t.test('closing while the cache is dead or hung finishes promptly', async (t) => {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  for (const fault of ['killed', 'hung'] as const) {
    const redis = await PrivateRedis.start()
    t.teardown(() => redis.kill())
    const app = await build({ config: testConfig({ ...sandbox.settings, REDIS_URL: redis.url }), logToStdout: false })
    if (fault === 'killed') await redis.kill()
    else redis.hang()
    const elapsed = await timedClose(app)
    t.ok(elapsed < CLOSE_BOUND_MS, `cache ${fault}: closed in ${Math.round(elapsed)} ms`)
  }
})

t.test('a plugin that fails to start closes what the others opened', async (t) => {
  await ensureTestDatabase()
  const started = performance.now()
  await t.rejects(build({ config: testConfig(), logToStdout: false }), /BILLING_API_URL is not set/)
  t.ok(performance.now() - started < CLOSE_BOUND_MS, 'fails promptly')
})

t.test('closing while the database is hung finishes promptly', async (t) => {
  const sandbox = await startTestSandbox(t)
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const app = await build({ config: testConfig({ ...sandbox.settings, DATABASE_URL: cluster.url, HEALTH_CHECK_TIMEOUT_MS: '300' }), logToStdout: false })
  await app.inject('/health')
  cluster.hang()
  await new Promise((resolve) => setTimeout(resolve, 1100))
  await app.inject('/health')
  const elapsed = await timedClose(app)
  t.ok(elapsed < CLOSE_BOUND_MS, `closed in ${Math.round(elapsed)} ms`)
})

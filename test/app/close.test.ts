import t from 'tap'
import { build } from '../../app.js'
import { ensureTestDatabase, startTestSandbox, testConfig } from '../helpers/app.js'
import { PrivateRedis } from '../helpers/private-redis.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { before } from '../helpers/before.js'

// With Redis hung, closing first learns so (one command timeout), then forces the job queue's
// close; a close that waited on the hung dependency would never end. Far above what closing takes.
const CLOSE_BOUND_MS = 30_000

async function closes (app: Awaited<ReturnType<typeof build>>): Promise<boolean> {
  return await before(CLOSE_BOUND_MS, app.close().then(() => true)) ?? false
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
    t.ok(await closes(app), `cache ${fault}: closed without waiting on it`)
  }
})

t.test('a plugin that fails to start closes what the others opened', async (t) => {
  await ensureTestDatabase()
  const failed = build({ config: testConfig(), logToStdout: false }).then(() => 'built', (error: unknown) => error)
  t.match(await before(CLOSE_BOUND_MS, failed), /BILLING_API_URL is not set/, 'fails promptly, naming the setting')
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
  t.ok(await closes(app), 'closed without waiting on the hung database')
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { classifyFailure } from '../../../../lib/errors.js'
import { tempDir } from '../../../helpers/app.js'
import { nextRound, placementTestApp } from '../../../helpers/placement.js'
import { PrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { placeOrder } from '../../../helpers/provisioning.js'
import { bearer } from '../../../helpers/tokens.js'

// A Redis of the test's own that refuses writes (maxmemory reached under noeviction: OOM) while the
// reconciliation hands an order the CRM approved to the job queue. Rounds run by the test.
const linesOf = (logDir: string) =>
  readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)

t.test('Redis refusing writes: logged as a Redis error, never as an upstream\'s; the order provisioned once Redis takes writes again', async (t) => {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const logDir = tempDir('logs')
  const { app, sandbox, token } = await placementTestApp(t, { REDIS_URL: redis.url, LOG_DIR: logDir, CRM_EVENTS_ENABLED: 'false', ORDERS_RECONCILE_INTERVAL_S: '3600' })
  const order = await placeOrder(app, token)
  sandbox.crm.updateOrder(order.crmOrderId, { Status: 'Approved' })

  const admin = redis.client(t)
  await admin.config('SET', 'maxmemory-policy', 'noeviction')
  await admin.config('SET', 'maxmemory', '1')
  const refusal: unknown = await admin.set('a-write', 'refused').catch((error: unknown) => error)
  t.match(refusal, { name: 'ReplyError', message: /^OOM / }, 'Redis refuses writes')
  t.equal(classifyFailure(refusal), 'redis_error', 'classified as Redis\'s')

  await nextRound(app)
  await waitFor('the failed round logged', async () => linesOf(logDir).some((line) => line.message === 'a reconciliation round did not finish; the next one takes it up'))
  const warnings = linesOf(logDir).filter((line) => line.level === 40)
  t.match(warnings.find((line) => line.message === 'a reconciliation round did not finish; the next one takes it up'), { task: 'crm-status', failure: 'redis_error' }, 'the job queue\'s refusal names Redis')
  t.same(warnings.filter((line) => line.failure === 'upstream_error').map((line) => line.message), [], 'no warning blames an upstream')

  await admin.config('SET', 'maxmemory', '0')
  await nextRound(app)
  await waitFor('the order Active', async () => (await app.inject({ url: `/api/orders/${order.id as string}`, headers: bearer(token) })).json().status === 'Active', 30_000)
})

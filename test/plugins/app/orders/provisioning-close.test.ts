import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { placeOrder } from '../../../helpers/provisioning.js'
import { buildTestApp, startTestSandbox, testKeyPrefix, testSchemaUrl } from '../../../helpers/app.js'
import { before } from '../../../helpers/before.js'
import { waitFor } from '../../../helpers/processes.js'
import { login } from '../../../helpers/tokens.js'
import type { Sandbox } from '../../../../dev/sandbox/index.js'

/*
 * An instance that closes with a provisioning job under way: the job finishes first, within
 * CRM_QUEUE_TIMEOUT_MS; one that takes longer is left, its lock unrenewed, for another instance to
 * take over, which repeats no step's effect.
 */

const activationCalled = (sandbox: Sandbox) => sandbox.telecom.calls.some((call) => call.path === '/v1/activations')

t.test('closing while a job runs: the job finishes before the close does', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_QUEUE_TIMEOUT_MS: '10000' }, sandbox)
  const order = await placeOrder(app, await login(app))
  sandbox.telecom.injectFault({ kind: 'latency', ms: 1000, route: 'activations' })
  await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('the activation under way', async () => activationCalled(sandbox))

  await app.close()
  t.equal(sandbox.crm.order(order.crmOrderId)?.Status, 'Activated', 'the close waited for the job: every step done, the CRM order Activated')
  t.equal(sandbox.telecom.activations.length, 1, 'one activation')
  t.equal(sandbox.billing.orders.find((placed) => placed.id === order.billingOrderId)?.status, 'Active')
})

t.test('a job outlasting CRM_QUEUE_TIMEOUT_MS: the close ends at the bound, says so, and another instance finishes the job, each step once', async (t) => {
  const sandbox = await startTestSandbox(t)
  const shared = { DATABASE_URL: await testSchemaUrl(t), REDIS_KEY_PREFIX: testKeyPrefix(), CRM_QUEUE_TIMEOUT_MS: '500', PROVISIONING_LOCK_MS: '2000', UPSTREAM_TIMEOUT_MS: '1000' }
  const closing = await buildTestApp(t, shared, sandbox)
  const order = await placeOrder(closing, await login(closing))
  sandbox.telecom.injectFault({ kind: 'blackhole', route: 'activations' })
  await closing.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('the activation under way', async () => activationCalled(sandbox))

  // The black hole never answers: only the jobs' bound ends the close, which says so below.
  t.ok(await before(30_000, closing.close().then(() => true)), 'closed, without waiting on the job')
  const warned = readFileSync(join(closing.config.LOG_DIR, 'combined.log'), 'utf8').split('\n').filter((line) => line.includes('provisioning jobs did not finish in time'))
  t.equal(warned.length, 1, 'one warning: the job is left to another instance')

  sandbox.telecom.clearFaults()
  const next = await buildTestApp(t, shared, sandbox)
  await waitFor('Active, taken over once the lock expired', async () => (await next.orders.store.findByCrmId(order.crmOrderId))?.status === 'Active', 20_000)
  t.equal(sandbox.telecom.activations.length, 1, 'one activation')
  t.same([...new Set(sandbox.telecom.idempotencyKeys.map((use) => use.key))], [order.crmOrderId], 'one idempotency key')
  t.equal(sandbox.crm.order(order.crmOrderId)?.Status, 'Activated')
})

import t from 'tap'
import { buildTestApp, startTestSandbox } from './helpers/app.js'
import { waitFor } from './helpers/processes.js'
import { bearer, login } from './helpers/tokens.js'
import type { FastifyInstance } from 'fastify'

async function placeOrder (app: FastifyInstance, token: string) {
  const response = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })
  if (response.statusCode !== 201) throw new Error(`order failed: ${response.statusCode} ${response.body}`)
  return response.json()
}

t.test('an order goes to billing, to the CRM in Pending Review, and is stored', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const token = await login(app)
  const order = await placeOrder(app, token)
  t.match(order, { status: 'Pending Review', productId: '1', billingCycle: 'monthly', billingOrderId: Number, crmOrderId: String, failureReason: null })
  t.match(sandbox.crm.order(order.crmOrderId), { Status: 'Pending Review', BillingOrderId__c: String(order.billingOrderId), BillingClientId__c: '1' })
  t.ok(sandbox.billing.orders.some((placed) => placed.id === order.billingOrderId && placed.status === 'Pending'), 'pending in billing')

  const list = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json()
  t.match(list, { page: 1, total: 1, orders: [{ id: order.id }] })
  t.same((await app.inject({ url: `/api/orders/${order.id}`, headers: bearer(token) })).json(), order)

  const other = await login(app, 'john@example.com', 'battery-staple')
  t.equal((await app.inject({ url: `/api/orders/${order.id}`, headers: bearer(other) })).statusCode, 404, 'another client\'s order is 404')
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(other) })).json().total, 0)
})

t.test('a provisioning job takes the order to Active, each step once', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const order = await placeOrder(app, await login(app))
  await app.jobQueue.enqueue(order.crmOrderId)
  await app.jobQueue.enqueue(order.crmOrderId)
  await waitFor('Active', async () => (await app.orders.findByCrmId(order.crmOrderId))?.status === 'Active')
  const stored = await app.orders.findByCrmId(order.crmOrderId)
  t.match(stored, { status: 'Active', telecomActivationId: String, msisdn: String, billingAcceptedAt: String, crmActivatedAt: String, provisioningAttempts: 1 })
  t.equal(sandbox.crm.order(order.crmOrderId)?.Status, 'Activated')
  t.same(sandbox.telecom.idempotencyKeys.map((use) => use.key), [order.crmOrderId], 'the telecom key is the CRM order id, used once')
  t.equal(sandbox.billing.orders.find((placed) => placed.id === order.billingOrderId)?.status, 'Active')
  // The order is Active a moment before BullMQ marks its job completed.
  await waitFor('the job completed', async () => (await app.inject('/health/queues')).json().jobs.completed === 1)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { health: 'healthy', completed: 1, failed: 0, waiting: 0, active: 0 }, 'the duplicate made no second job')
})

t.test('a retry after a lost AcceptOrder answer reconciles instead of failing', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_BACKOFF_MS: '50' }, sandbox)
  const order = await placeOrder(app, await login(app))
  // The order is accepted but the answer never arrives: the next attempt sees "not Pending".
  sandbox.billing.injectFault({ kind: 'http5xx', status: 502, after: true, times: 1, route: 'AcceptOrder' })
  await app.jobQueue.enqueue(order.crmOrderId)
  await waitFor('Active', async () => (await app.orders.findByCrmId(order.crmOrderId))?.status === 'Active')
  t.match(await app.orders.findByCrmId(order.crmOrderId), { status: 'Active', provisioningAttempts: 2 })
  t.equal(sandbox.telecom.activations.length, 1, 'the telecom step was not repeated')
})

t.test('telecom always failing: retries, then Failed with the reason; jobs health follows', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '3', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
  const token = await login(app)
  sandbox.telecom.injectFault({ kind: 'http5xx', status: 500 })
  const placed: Array<{ crmOrderId: string }> = []
  for (let i = 0; i < 6; i++) placed.push(await placeOrder(app, token))
  for (const order of placed) await app.jobQueue.enqueue(order.crmOrderId)
  await waitFor('all Failed', async () => {
    const stored = await Promise.all(placed.map((order) => app.orders.findByCrmId(order.crmOrderId)))
    return stored.every((order) => order?.status === 'Failed')
  }, 30_000)
  const first = placed[0]!
  const failed = await app.orders.findByCrmId(first.crmOrderId)
  t.match(failed, { status: 'Failed', failureReason: /^http_5xx: /, provisioningAttempts: 3 })
  t.match(sandbox.crm.order(first.crmOrderId), { Provisioning_Error__c: /http_5xx/ }, 'the reason is written to the CRM')
  t.equal(sandbox.telecom.calls.filter((call) => call.path === '/v1/activations').length, 18, 'three attempts each')
  await waitFor('the jobs failed', async () => (await app.inject('/health/queues')).json().jobs.failed === 6)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { failed: 6, health: 'degraded' }, '6 failed jobs: degraded (> 5)')
})

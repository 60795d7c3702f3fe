import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import pg from 'pg'
import { buildTestApp, startTestSandbox } from '../../helpers/app.js'
import { PrivatePostgres } from '../../helpers/private-postgres.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'

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

  // The product id as the order gives it back, a string of digits, places an order too.
  const again = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: '2', billingCycle: 'annually' } })
  t.equal(again.statusCode, 201)
  t.match(again.json(), { productId: '2', billingCycle: 'annually' })
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').at(-1)?.params?.['pid[0]'], '2', 'product 2 ordered in billing')
})

t.test('the CRM order carries CRM_ORDER_ACCOUNT_ID as its AccountId; unset, none', async (t) => {
  const sandbox = await startTestSandbox(t)
  const accountId = '001000000000001AAA'
  const withAccount = await buildTestApp(t, { CRM_ORDER_ACCOUNT_ID: accountId }, sandbox)
  const placed = await placeOrder(withAccount, await login(withAccount))
  t.equal(sandbox.crm.order(placed.crmOrderId)?.AccountId, accountId)

  const withoutAccount = await buildTestApp(t, {}, sandbox)
  const unassigned = await placeOrder(withoutAccount, await login(withoutAccount))
  t.equal(sandbox.crm.order(unassigned.crmOrderId)?.AccountId ?? null, null)
})

t.test('orders are placed in billing with BILLING_PAYMENT_METHOD; one WHMCS refuses is 503 BILLING_UNAVAILABLE, nothing stored', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_PAYMENT_METHOD: 'paypal' }, sandbox)
  const token = await login(app)
  const order = await placeOrder(app, token)
  t.equal(sandbox.billing.orders.find((placed) => placed.id === order.billingOrderId)?.paymentmethod, 'paypal')

  const misconfigured = await buildTestApp(t, { BILLING_PAYMENT_METHOD: 'cheque' }, sandbox)
  const refused = await misconfigured.inject({ method: 'POST', url: '/api/orders', headers: bearer(await login(misconfigured)), payload: { productId: 1, billingCycle: 'monthly' } })
  t.equal(refused.statusCode, 503, 'the service\'s configuration, not the customer\'s order, is at fault')
  t.match(refused.json(), { code: 'BILLING_UNAVAILABLE' })
  t.equal((await misconfigured.inject({ url: '/api/orders', headers: bearer(await login(misconfigured)) })).json().total, 0, 'no order stored')
})

t.test('the order list pages newest first, with the total on every page and past the last', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const token = await login(app)
  const [first, second, third] = [await placeOrder(app, token), await placeOrder(app, token), await placeOrder(app, token)]
  const page = async (number: number) => (await app.inject({ url: `/api/orders?page=${number}&limit=2`, headers: bearer(token) })).json()
  t.same((await page(1)).orders.map((order: { id: string }) => order.id), [third.id, second.id])
  t.match(await page(1), { page: 1, limit: 2, total: 3 })
  t.same((await page(2)).orders.map((order: { id: string }) => order.id), [first.id])
  t.same(await page(3), { orders: [], page: 3, limit: 2, total: 3 })
  const other = await login(app, 'john@example.com', 'battery-staple')
  t.same((await app.inject({ url: '/api/orders?page=2', headers: bearer(other) })).json(), { orders: [], page: 2, limit: 25, total: 0 })
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

t.test('the same, with GetOrders refused to the API role: the order not pending is taken as accepted, with a warning', async (t) => {
  const refusals = [
    { kind: 'error' as const, route: 'GetOrders', status: 403, message: 'Invalid Permissions: API action "getorders" is not allowed' },
    { kind: 'error' as const, route: 'GetOrders', message: 'Command Not Found' }
  ]
  for (const refusal of refusals) {
    const sandbox = await startTestSandbox(t)
    const app = await buildTestApp(t, { PROVISIONING_BACKOFF_MS: '50' }, sandbox)
    const warnings: string[] = []
    const warn = app.log.warn.bind(app.log)
    app.log.warn = ((details: object, message: string) => { warnings.push(message); warn(details, message) }) as typeof app.log.warn
    const order = await placeOrder(app, await login(app))
    sandbox.billing.injectFault({ kind: 'http5xx', status: 502, after: true, times: 1, route: 'AcceptOrder' })
    sandbox.billing.injectFault(refusal)
    await app.jobQueue.enqueue(order.crmOrderId)
    await waitFor('Active', async () => (await app.orders.findByCrmId(order.crmOrderId))?.status === 'Active')
    t.match(await app.orders.findByCrmId(order.crmOrderId), { status: 'Active', provisioningAttempts: 2 }, refusal.message)
    t.ok(warnings.some((message) => message.includes('GetOrders is refused: taken as accepted')))
  }
})

t.test('telecom always failing: retries, then Failed with the reason; jobs health follows, then recovers', async (t) => {
  const sandbox = await startTestSandbox(t)
  // A short health window, so the failures age out of it within the test.
  const windowMs = 15_000
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '3', PROVISIONING_BACKOFF_MS: '20', QUEUE_HEALTH_WINDOW_MS: String(windowMs) }, sandbox)
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
  // The order is stored Failed first, then the reason goes to the CRM through its queue.
  await waitFor('the reason in the CRM', async () => sandbox.crm.order(first.crmOrderId)?.Provisioning_Error__c != null)
  t.match(sandbox.crm.order(first.crmOrderId), { Provisioning_Error__c: /http_5xx/ }, 'the reason is written to the CRM')
  t.equal(sandbox.telecom.calls.filter((call) => call.path === '/v1/activations').length, 18, 'three attempts each')
  await waitFor('the jobs failed', async () => (await app.inject('/health/queues')).json().jobs.failed === 6)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { failed: 6, recentFailed: 6, health: 'degraded' }, '6 failed jobs: degraded (> 5)')
  await waitFor('the failures out of the window', async () => (await app.inject('/health/queues')).json().jobs.recentFailed === 0, windowMs + 15_000)
  t.match((await app.inject('/health/queues')).json().jobs, { failed: 6, recentFailed: 0, health: 'healthy' }, 'the failed jobs are kept, yet an old incident no longer degrades the queue')
})

t.test('telecom or the CRM refusing connections during provisioning: retried, then Failed with connection_refused', async (t) => {
  for (const upstream of ['telecom', 'crm'] as const) {
    const sandbox = await startTestSandbox(t)
    const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '2', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
    const order = await placeOrder(app, await login(app))
    await sandbox[upstream].down()
    await app.jobQueue.enqueue(order.crmOrderId)
    await waitFor(`Failed with ${upstream} down`, async () => (await app.orders.findByCrmId(order.crmOrderId))?.status === 'Failed', 30_000)
    t.match(await app.orders.findByCrmId(order.crmOrderId), { status: 'Failed', failureReason: /^connection_refused: /, provisioningAttempts: 2 }, `${upstream} down: two attempts, then Failed with the class`)
    t.equal(sandbox.telecom.activations.length, upstream === 'telecom' ? 0 : 1, `${upstream} down: the telecom step ${upstream === 'telecom' ? 'never happened' : 'happened once, not per attempt'}`)
    await sandbox[upstream].up()
  }
})

t.test('telecom rate-limiting (429) during provisioning: the attempts are retried, one activation once the limit lifts', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '5', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
  const order = await placeOrder(app, await login(app))
  sandbox.telecom.injectFault({ kind: 'error', status: 429, code: 'rate_limit_error', message: 'Too many requests', times: 2, route: 'activations' })
  await app.jobQueue.enqueue(order.crmOrderId)
  await waitFor('Active', async () => (await app.orders.findByCrmId(order.crmOrderId))?.status === 'Active', 15_000)
  t.match(await app.orders.findByCrmId(order.crmOrderId), { status: 'Active', provisioningAttempts: 3, failureReason: null }, 'two refused attempts, then the third')
  t.equal(sandbox.telecom.activations.length, 1, 'one activation')
  t.equal(sandbox.telecom.calls.filter((call) => call.path === '/v1/activations').length, 3, 'three calls, each under the same idempotency key')
  t.same([...new Set(sandbox.telecom.idempotencyKeys.map((use) => use.key))], [order.crmOrderId])
})

t.test('the CRM over its quota during provisioning: the CRM step is retried, then the order Failed with quota_exceeded', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '3', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
  const token = await login(app)
  const placed = [await placeOrder(app, token), await placeOrder(app, token)]
  const usage = sandbox.crm.apiUsage
  sandbox.crm.setApiUsage({ used: usage.max })
  for (const order of placed) await app.jobQueue.enqueue(order.crmOrderId)
  await waitFor('both Failed', async () => {
    const stored = await Promise.all(placed.map((order) => app.orders.findByCrmId(order.crmOrderId)))
    return stored.every((order) => order?.status === 'Failed')
  }, 30_000)
  const failed = await app.orders.findByCrmId(placed[0]!.crmOrderId)
  t.match(failed, { status: 'Failed', failureReason: /^quota_exceeded: /, provisioningAttempts: 3 })
  t.not(failed?.telecomActivationId, null, 'the steps before the CRM were done, once')
  t.equal(sandbox.telecom.activations.filter((activation) => activation.orderId === placed[0]!.crmOrderId).length, 1, 'one activation, not one per attempt')
  sandbox.crm.setApiUsage(usage)
})

function orderRequest (token: string, correlationId: string) {
  return { method: 'POST' as const, url: '/api/orders', headers: { ...bearer(token), 'x-correlation-id': correlationId }, payload: { productId: 1, billingCycle: 'monthly' } }
}

t.test('billing refusing the order (result=error): 422 ORDER_REJECTED, nothing stored', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const token = await login(app)
  sandbox.billing.injectFault({ kind: 'error', route: 'AddOrder', message: 'Unable to add order when client status is Closed' })
  const response = await app.inject(orderRequest(token, 'rejected-1'))
  t.equal(response.statusCode, 422)
  t.same(response.json(), { statusCode: 422, error: 'Unprocessable Entity', message: 'The billing system refused the order', code: 'ORDER_REJECTED', correlationId: 'rejected-1' })
  t.notMatch(response.body, /Closed/, 'not the billing system\'s words')
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).json().total, 0, 'no order stored')
  t.equal(sandbox.crm.orders.length, 0, 'nothing sent to the CRM')
  // The caller's order refused is no billing outage: neither the queue nor the error rate counts it.
  const { totalRequests, completedRequests, failedRequests } = app.billingQueue.metrics()
  t.same({ completedRequests, failedRequests }, { completedRequests: totalRequests, failedRequests: 0 }, 'completed, not failed')
  t.equal(app.billingQueue.recentFailures(), 0)
  const billingCalls = app.upstreamCalls.billing.summary()
  t.ok(billingCalls.count > 0 && billingCalls.failures === 0, 'the billing call counts as answered in the external error rate')

  sandbox.billing.clearFaults()
  sandbox.billing.injectFault({ kind: 'http5xx', route: 'AddOrder', status: 502 })
  const unavailable = await app.inject(orderRequest(token, 'rejected-2'))
  t.equal(unavailable.statusCode, 503, 'an HTTP 5xx is billing being unavailable, not a refusal')
  t.match(unavailable.json(), { code: 'BILLING_UNAVAILABLE' })

  sandbox.billing.clearFaults()
  await sandbox.billing.down()
  const down = await app.inject(orderRequest(token, 'billing-down'))
  t.equal(down.statusCode, 503, 'billing refusing connections: 503')
  t.same(down.json(), { statusCode: 503, error: 'Service Unavailable', message: 'Billing service is temporarily unavailable', code: 'BILLING_UNAVAILABLE', correlationId: 'billing-down' })
  t.notMatch(down.body, /127\.0\.0\.1|ECONN/, 'no host or network code')
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).json().total, 0, 'still no order stored')
  await sandbox.billing.up()
})

t.test('an AddOrder answer that cannot be read is billing being unavailable (503), not a refusal: the order may stand', async (t) => {
  const sandbox = await startTestSandbox(t)
  // Relays every action to the sandbox but AddOrder, whose answer a maintenance page replaces once the order is placed.
  const relay = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      fetch(sandbox.settings.BILLING_API_URL!, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body })
        .then(async (answer) => {
          const maintenance = new URLSearchParams(body).get('action') === 'AddOrder'
          response.writeHead(200, { 'content-type': maintenance ? 'text/html' : 'application/json' }).end(maintenance ? '<html>Maintenance</html>' : await answer.text())
        }, () => response.writeHead(502).end())
    })
  })
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => relay.close(resolve)))
  const app = await buildTestApp(t, { BILLING_API_URL: `http://127.0.0.1:${(relay.address() as AddressInfo).port}/includes/api.php` }, sandbox)
  const token = await login(app)
  const response = await app.inject(orderRequest(token, 'unreadable-1'))
  t.equal(response.statusCode, 503)
  t.match(response.json(), { code: 'BILLING_UNAVAILABLE', correlationId: 'unreadable-1' })
  t.equal(sandbox.billing.orders.length, 1, 'the billing system did place it')
})

t.test('the CRM down, hanging, failing or over its quota: 503 CRM_UNAVAILABLE, the order stored Failed with the class', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_QUEUE_TIMEOUT_MS: '500' }, sandbox)
  const token = await login(app)
  const usage = sandbox.crm.apiUsage
  const faults = [
    { failure: 'connection_refused', break: () => sandbox.crm.down(), mend: () => sandbox.crm.up() },
    { failure: 'timeout', break: () => sandbox.crm.injectFault({ kind: 'blackhole', route: 'rest/sobjects/Order' }), mend: () => sandbox.crm.clearFaults() },
    { failure: 'http_5xx', break: () => sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/sobjects/Order', status: 500 }), mend: () => sandbox.crm.clearFaults() },
    {
      failure: 'auth_failed',
      // The session expires and the CRM refuses to grant another.
      break: () => {
        sandbox.crm.expireAccessTokens()
        sandbox.crm.injectFault({ kind: 'error', route: 'oauth/token' })
      },
      mend: () => sandbox.crm.clearFaults()
    },
    { failure: 'quota_exceeded', break: () => sandbox.crm.setApiUsage({ used: usage.max }), mend: () => sandbox.crm.setApiUsage(usage) }
  ]
  for (const fault of faults) {
    await fault.break()
    const correlationId = `crm-${fault.failure}`
    const response = await app.inject(orderRequest(token, correlationId))
    t.equal(response.statusCode, 503, `${fault.failure}: 503`)
    t.same(response.json(), { statusCode: 503, error: 'Service Unavailable', message: 'CRM service is temporarily unavailable', code: 'CRM_UNAVAILABLE', correlationId }, `${fault.failure}: the error shape`)
    t.notMatch(response.body, /127\.0\.0\.1|ECONN|REQUEST_LIMIT|invalid_grant|sobjects|Error:/, `${fault.failure}: no upstream text`)
    const [stored] = (await app.inject({ url: '/api/orders?limit=1', headers: bearer(token) })).json().orders
    t.match(stored, { status: 'Failed', failureReason: `crm_${fault.failure}: the CRM order could not be created`, crmOrderId: null, billingOrderId: Number }, `${fault.failure}: stored Failed with the class`)
    t.equal(sandbox.billing.orders.find((placed) => placed.id === stored.billingOrderId)?.status, 'Pending', `${fault.failure}: the billing order is left pending`)
    await fault.mend()
  }
  t.equal(sandbox.crm.orders.length, 0, 'no CRM order was created')
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).json().total, faults.length, 'one stored order per attempt')
  t.match(await placeOrder(app, token), { status: 'Pending Review', crmOrderId: String }, 'mended: orders go through again')
})

t.test('the CRM queue full: POST /api/orders is 503 CRM_UNAVAILABLE at once, the order stored Failed', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_QUEUE_CONCURRENCY: '1', CRM_QUEUE_MAX_SIZE: '0' }, sandbox)
  const token = await login(app)
  // The one slot held by a slow CRM call; with no room to wait, the order's CRM call is refused.
  sandbox.crm.injectFault({ kind: 'latency', ms: 1000, route: 'rest' })
  const holding = app.crmQueue.run((deadline) => app.crm.getLimits(deadline))
  await waitFor('the slot taken', async () => app.crmQueue.metrics().pendingRequests === 1, 2000)
  const started = performance.now()
  const response = await app.inject(orderRequest(token, 'crm-full'))
  const tookMs = performance.now() - started
  t.equal(response.statusCode, 503)
  t.same(response.json(), { statusCode: 503, error: 'Service Unavailable', message: 'CRM service is temporarily unavailable', code: 'CRM_UNAVAILABLE', correlationId: 'crm-full' })
  t.ok(tookMs < 900, `answered in ${Math.round(tookMs)} ms, before the slot's call ends`)
  const [stored] = (await app.inject({ url: '/api/orders?limit=1', headers: bearer(token) })).json().orders
  t.match(stored, { status: 'Failed', failureReason: 'crm_queue_full: the CRM order could not be created', crmOrderId: null })
  t.equal(app.crmQueue.metrics().failedRequests, 1, 'the refusal counts as a failed request')
  await holding
  sandbox.crm.clearFaults()
  t.match(await placeOrder(app, token), { status: 'Pending Review' }, 'a free slot: orders go through again')
})

const DATABASE_UNAVAILABLE = { statusCode: 500, error: 'Internal Server Error', message: 'Database is temporarily unavailable', code: 'DATABASE_UNAVAILABLE' }
// Timers and the event loop of a busy test machine: how late an answer may be past its bound.
const MARGIN_MS = 500

/** The request's answer and how long it took. */
async function timed (app: FastifyInstance, request: InjectOptions) {
  const started = performance.now()
  const response = await app.inject(request)
  return { response, elapsed: performance.now() - started }
}

t.test('PostgreSQL hung or stopped: every API request answers 500 DATABASE_UNAVAILABLE in bounded time, then is served again', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const connectTimeoutMs = 500
  const queryTimeoutMs = 1500
  const healthTimeoutMs = 500
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {
    DATABASE_URL: cluster.url,
    DATABASE_CONNECT_TIMEOUT_MS: String(connectTimeoutMs),
    DATABASE_QUERY_TIMEOUT_MS: String(queryTimeoutMs),
    HEALTH_CHECK_TIMEOUT_MS: String(healthTimeoutMs)
  }, sandbox)
  const token = await login(app)
  const order = await placeOrder(app, token)
  const unavailable = (what: string, { response, elapsed }: { response: LightMyRequestResponse, elapsed: number }, boundMs: number) => {
    t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, `${what}: 500 DATABASE_UNAVAILABLE`)
    t.notMatch(response.body, /ECONN|timeout|terminated|127\.0\.0\.1|postgres/i, `${what}: no driver text`)
    t.ok(elapsed <= boundMs + MARGIN_MS, `${what}: answered in ${Math.round(elapsed)} ms (bound ${boundMs} ms)`)
  }
  const databaseFails = async () => (await app.inject('/health')).json().checks.database === 'fail'
  const served = async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200 &&
    (await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode === 200
  /** Once the health check has seen the database away, every API request, with a query or without. */
  const everyApiRequest = async (how: string) => {
    const billingOrders = sandbox.billing.orders.length
    unavailable(`${how}, GET /api/orders`, await timed(app, { url: '/api/orders', headers: bearer(token) }), healthTimeoutMs)
    unavailable(`${how}, GET /api/orders/:id`, await timed(app, { url: `/api/orders/${order.id}`, headers: bearer(token) }), healthTimeoutMs)
    unavailable(`${how}, GET /api/invoices`, await timed(app, { url: '/api/invoices', headers: bearer(token) }), healthTimeoutMs)
    unavailable(`${how}, GET /api/invoices/:id`, await timed(app, { url: '/api/invoices/1001', headers: bearer(token) }), healthTimeoutMs)
    unavailable(`${how}, GET /api/events`, await timed(app, { url: '/api/events', headers: bearer(token) }), healthTimeoutMs)
    unavailable(`${how}, POST /api/orders`, await timed(app, { method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } }), healthTimeoutMs)
    unavailable(`${how}, POST /auth/login`, await timed(app, { method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'correct-horse' } }), healthTimeoutMs)
    unavailable(`${how}, POST /auth/logout`, await timed(app, { method: 'POST', url: '/auth/logout', headers: bearer(token) }), healthTimeoutMs)
    t.equal(sandbox.billing.orders.length, billingOrders, `${how}: nothing placed in billing`)
  }
  // The list's two queries leave two open connections in the pool.
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode, 200)

  // Past the reuse time of the last check run, so the next request finds none to reuse.
  await new Promise((resolve) => setTimeout(resolve, 1100))
  cluster.hang()
  // The gate judges by the last finished check and never waits for one: a route without a query
  // answers at once until a check has seen the hang.
  const early = await timed(app, { url: '/api/invoices', headers: bearer(token) })
  t.equal(early.response.statusCode, 200, 'hung, before the health check knows: invoices still served')
  t.ok(early.elapsed < healthTimeoutMs, `without waiting for a check (${Math.round(early.elapsed)} ms)`)
  // Until a health check sees it, a route's own query gives up on its timeout.
  unavailable('hung, before the health check knows', await timed(app, { url: '/api/orders', headers: bearer(token) }), queryTimeoutMs)
  await waitFor('the hang in /health', databaseFails)
  await everyApiRequest('hung')

  cluster.resume()
  await waitFor('the API to be served again', served)
  await cluster.stop()
  await waitFor('the stop in /health', databaseFails)
  await everyApiRequest('stopped')

  await cluster.start()
  await waitFor('the API to be served again', served)
  t.pass('recovers without restarting the service')
})

t.test('the business pool exhausted: callers wait DATABASE_CONNECT_TIMEOUT_MS, then 500 DATABASE_UNAVAILABLE; /health is unaffected', async (t) => {
  const app = await buildTestApp(t, { DATABASE_POOL_MAX: '1', DATABASE_CONNECT_TIMEOUT_MS: '400' })
  const token = await login(app)
  const lent = await app.pg.connect()
  let returned = false
  const giveBack = () => {
    if (!returned) lent.release()
    returned = true
  }
  t.teardown(giveBack)
  const { response, elapsed } = await timed(app, { url: '/api/orders', headers: bearer(token) })
  t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, '500 DATABASE_UNAVAILABLE')
  t.ok(elapsed >= 350 && elapsed < 400 + MARGIN_MS, `after the connect timeout (${Math.round(elapsed)} ms)`)
  const health = await app.inject('/health')
  t.equal(health.statusCode, 200, '/health answers ok: its probe has a connection of its own')
  t.same(health.json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } })
  giveBack()
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode, 200, 'served again once the connection is back')
})

t.test('PostgreSQL at max_connections: 500 DATABASE_UNAVAILABLE at once, served again once connections free', async (t) => {
  const cluster = await PrivatePostgres.start({ maxConnections: 5 })
  t.teardown(() => cluster.destroy())
  const app = await buildTestApp(t, { DATABASE_URL: cluster.url })
  const token = await login(app)
  // The test takes every connection the server has left, so the service's pool can open none.
  const held: pg.Client[] = []
  t.teardown(() => Promise.all(held.map((client) => client.end())))
  for (;;) {
    const client = new pg.Client({ connectionString: cluster.url })
    const refusal = await client.connect().then(() => undefined, (error: unknown) => error)
    if (refusal !== undefined) {
      t.match(refusal, { code: '53300' }, 'the server refuses more connections: too_many_connections')
      break
    }
    held.push(client)
    if (held.length > 5) throw new Error('max_connections was not reached')
  }

  const { response, elapsed } = await timed(app, { url: '/api/orders', headers: bearer(token) })
  t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, '500 DATABASE_UNAVAILABLE, not INTERNAL_ERROR')
  t.notMatch(response.body, /too many|clients|53300/i, 'no driver text')
  t.ok(elapsed < 1000, `refused at once (${Math.round(elapsed)} ms), not after DATABASE_CONNECT_TIMEOUT_MS`)

  await Promise.all(held.splice(0).map((client) => client.end()))
  await waitFor('the orders to be served again', async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200)
  t.pass('served again without restarting the service')
})

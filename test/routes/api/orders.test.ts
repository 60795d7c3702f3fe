import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { placeOrder } from '../../helpers/provisioning.js'
import { buildTestApp, startTestSandbox } from '../../helpers/app.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'

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
  const { totalRequests, completedRequests, failedRequests } = app.upstreams.billing.queue.metrics()
  t.same({ completedRequests, failedRequests }, { completedRequests: totalRequests, failedRequests: 0 }, 'completed, not failed')
  t.equal(app.upstreams.billing.queue.recentFailures(), 0)
  const billingCalls = app.upstreams.billing.calls.summary()
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
  await sandbox.billing.up()
  // Billing may have placed those two: each is kept Failed, and whatever billing placed is cancelled.
  const { orders: failed } = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json()
  t.match(failed, [{ status: 'Failed', failureReason: /^billing_connection_refused/ }, { status: 'Failed', failureReason: /^billing_http_5xx/ }])
  t.equal(sandbox.billing.orders.filter((order) => order.status === 'Pending').length, 0, 'no billing order left pending')
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

t.test('the CRM refusing the create (HTTP 500, its quota, a session it will not grant): 503 ORDER_CANCELLED, the order Failed with the class, its billing order and invoice cancelled', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const token = await login(app)
  const usage = sandbox.crm.apiUsage
  const faults = [
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
    t.same(response.json(), {
      statusCode: 503,
      error: 'Service Unavailable',
      message: 'The CRM could not take the order: it was not placed, and its billing order and invoice are cancelled',
      code: 'ORDER_CANCELLED',
      correlationId
    }, `${fault.failure}: the error shape`)
    t.notMatch(response.body, /127\.0\.0\.1|ECONN|REQUEST_LIMIT|invalid_grant|sobjects|Error:|at /, `${fault.failure}: no upstream text, no stack`)
    const [stored] = (await app.inject({ url: '/api/orders?limit=1', headers: bearer(token) })).json().orders
    t.match(stored, { status: 'Failed', failureReason: `crm_${fault.failure}: the CRM order could not be created`, crmOrderId: null, billingOrderId: Number }, `${fault.failure}: stored Failed with the class`)
    const billingOrder = sandbox.billing.orders.find((placed) => placed.id === stored.billingOrderId)
    t.equal(billingOrder?.status, 'Cancelled', `${fault.failure}: the billing order is cancelled`)
    t.equal(sandbox.billing.invoices.find((invoice) => invoice.id === billingOrder?.invoiceid)?.status, 'Cancelled', `${fault.failure}: so is its invoice`)
    await fault.mend()
  }
  t.equal(sandbox.crm.orders.length, 0, 'no CRM order was created')
  t.same(sandbox.billing.calls.filter((call) => call.route === 'CancelOrder').map((call) => call.params?.noemail), ['true', 'true', 'true'], 'CancelOrder without email')
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).json().total, faults.length, 'one stored order per attempt')
  t.match(await placeOrder(app, token), { status: 'Pending Review', crmOrderId: String }, 'mended: orders go through again')
})

t.test('the CRM queue full: POST /api/orders is 503 ORDER_CANCELLED at once, the order stored Failed, its billing order cancelled', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_QUEUE_CONCURRENCY: '1', CRM_QUEUE_MAX_SIZE: '0' }, sandbox)
  const token = await login(app)
  // The one slot held by a slow CRM call; with no room to wait, the order's CRM call is refused.
  sandbox.crm.injectFault({ kind: 'latency', ms: 1000, route: 'rest' })
  const holding = app.upstreams.crm.queue.run((deadline) => app.upstreams.crm.client.getLimits(deadline))
  await waitFor('the slot taken', async () => app.upstreams.crm.queue.metrics().pendingRequests === 1, 2000)
  const first = await Promise.race([app.inject(orderRequest(token, 'crm-full')), holding.then(() => undefined, () => undefined)])
  if (first === undefined) throw new Error('POST /api/orders answered only after the call holding the slot ended: it waited for room')
  const response = first
  t.equal(response.statusCode, 503, 'answered before the slot\'s call ends')
  t.match(response.json(), { statusCode: 503, code: 'ORDER_CANCELLED', correlationId: 'crm-full' })
  const [stored] = (await app.inject({ url: '/api/orders?limit=1', headers: bearer(token) })).json().orders
  t.match(stored, { status: 'Failed', failureReason: 'crm_queue_full: the CRM order could not be created', crmOrderId: null })
  t.equal(sandbox.billing.orders.find((placed) => placed.id === stored.billingOrderId)?.status, 'Cancelled')
  t.equal(app.upstreams.crm.queue.metrics().failedRequests, 1, 'the refusal counts as a failed request')
  await holding
  sandbox.crm.clearFaults()
  t.match(await placeOrder(app, token), { status: 'Pending Review' }, 'a free slot: orders go through again')
})

import t from 'tap'
import { nextRound, ORDER, placementTestApp, placementViolations, storedPlacements, untilNotInUse } from '../../helpers/placement.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer } from '../../helpers/tokens.js'

function withKey (token: string, key: string) {
  return { ...ORDER, headers: { ...bearer(token), 'idempotency-key': key } }
}

t.test('the CRM refuses the create with 500 after billing took the order: 5xx; the retry with the same key, once the CRM is back, answers 201 with the order and its CRM order; AddOrder once', async (t) => {
  const { sandbox, databaseUrl, app, token } = await placementTestApp(t)
  sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/sobjects/Order', status: 500 })
  const failed = await app.inject(withKey(token, 'crm-500-1'))
  t.ok(failed.statusCode >= 500, `5xx (${failed.statusCode})`)
  t.match(failed.json(), { code: 'ORDER_INCOMPLETE', message: /same Idempotency-Key/ })
  const stillDown = await app.inject(withKey(token, 'crm-500-1'))
  t.match(stillDown.json(), { statusCode: 503, code: 'ORDER_INCOMPLETE' }, 'a retry while the CRM still refuses: 5xx again, kept')
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending'], 'the billing order waits for the retry')

  sandbox.crm.clearFaults()
  const resumed = await app.inject(withKey(token, 'crm-500-1'))
  t.equal(resumed.statusCode, 201)
  const order = resumed.json()
  t.match(order, { status: 'Pending Review', crmOrderId: String, billingOrderId: sandbox.billing.orders[0]?.id })
  t.equal(sandbox.crm.orders[0]?.Id, order.crmOrderId, 'its CRM order')
  const again = await app.inject(withKey(token, 'crm-500-1'))
  t.equal(again.statusCode, 201)
  t.equal(again.body, resumed.body, 'the same answer as a first success, from then on')

  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 1, 'AddOrder once')
  t.same(sandbox.billing.orders.map((billingOrder) => billingOrder.status), ['Pending'], 'one billing order, never cancelled')
  t.equal(sandbox.crm.orders.length, 1, 'one CRM order')
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

t.test('retries while a placement runs longer than one hold: each told 409 with retry-after; one CRM create', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t, { CRM_QUEUE_TIMEOUT_MS: '15000', UPSTREAM_TIMEOUT_MS: '15000' })
  // Longer than one hold (5 s): only its renewal keeps retries away.
  sandbox.crm.injectFault({ kind: 'latency', route: 'rest/sobjects/Order', ms: 7000, times: 1 })
  const first = { answered: false }
  const placing = app.inject(withKey(token, 'long-1')).finally(() => { first.answered = true })
  await waitFor('the CRM create under way', async () => sandbox.crm.callsInProgress === 1, 10_000)
  const retries: number[] = []
  while (!first.answered) {
    const retry = await app.inject(withKey(token, 'long-1'))
    if (!first.answered) retries.push(retry.statusCode)
    if (retry.statusCode === 409) t.ok(Number(retry.headers['retry-after']) >= 1)
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  // The last retry may come back after the placement stored its answer and before its own request
  // ended here: it gets that answer, 201.
  const whileRunning = retries.at(-1) === 201 ? retries.slice(0, -1) : retries
  t.ok(whileRunning.length > 0 && whileRunning.every((status) => status === 409), `every retry while it ran: 409 (${retries.join(', ')})`)
  const done = await placing
  t.equal(done.statusCode, 201, done.body)
  t.equal(sandbox.crm.calls.filter((call) => call.route === 'rest/sobjects/Order').length, 1, 'one CRM create')
  t.equal(sandbox.crm.orders.length, 1)
})

t.test('a kept placement waits for its retry: the reconciliation leaves it alone until ORDERS_PLACEMENT_RESUME_S has passed', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t)
  sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/sobjects/Order', status: 500, times: 1 })
  t.equal((await app.inject(withKey(token, 'waits-1'))).statusCode, 503)
  // Past the request's claim, after which an unkeyed placement would be undone.
  await waitFor('the claim to run out', async () =>
    (await app.pg.query('SELECT 1 FROM orders WHERE placement_claimed_until < now()')).rowCount === 1, 20_000)
  await nextRound(app)
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending'], 'not cancelled: the default 900 s have not passed')
  t.notOk(sandbox.billing.calls.some((call) => call.route === 'CancelOrder'))
  t.equal((await app.inject(withKey(token, 'waits-1'))).statusCode, 201, 'the retry completes it')
})

t.test('a kept placement nobody retries within ORDERS_PLACEMENT_RESUME_S: the reconciliation cancels its billing order and invoice; the key then answers 422, never a second order', async (t) => {
  const { sandbox, databaseUrl, app, token, recovered } = await placementTestApp(t, { ORDERS_PLACEMENT_RESUME_S: '1' })
  sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/sobjects/Order', status: 500, times: 1 })
  t.equal((await app.inject(withKey(token, 'abandoned-1'))).statusCode, 503)
  await recovered()
  const [billingOrder] = sandbox.billing.orders
  t.equal(billingOrder?.status, 'Cancelled', 'CancelOrder in billing')
  t.equal(sandbox.billing.invoices.find((invoice) => invoice.id === billingOrder?.invoiceid)?.status, 'Cancelled', 'its invoice too')
  t.ok(sandbox.billing.calls.some((call) => call.route === 'CancelOrder'))
  const [order] = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json().orders
  t.match(order, { status: 'Failed', failureReason: /^placement_interrupted/, crmOrderId: null })

  const late = await app.inject(withKey(token, 'abandoned-1'))
  t.equal(late.statusCode, 422)
  t.match(late.json(), { code: 'ORDER_PLACEMENT_CANCELLED', message: /new key/ })
  t.equal((await app.inject(withKey(token, 'abandoned-1'))).body, late.body, 'the key\'s answer from then on')
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 1, 'AddOrder once for the key, ever')
  t.equal(sandbox.crm.orders.length, 0)
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

t.test('an AddOrder answer lost (billing placed the order after its caller gave up): 503; the retry with the key finds that billing order and completes it, 201; AddOrder once', async (t) => {
  const { sandbox, databaseUrl, app, token } = await placementTestApp(t)
  // A first order: the floor that tells a lost answer's order apart.
  t.equal((await app.inject(withKey(token, 'before-1'))).statusCode, 201)
  sandbox.billing.injectFault({ kind: 'latency', route: 'AddOrder', ms: 3000, times: 1 })
  const lost = await app.inject(withKey(token, 'lost-1'))
  t.match(lost.json(), { statusCode: 503, code: 'BILLING_UNAVAILABLE' })
  await waitFor('billing to place it after all', async () => sandbox.billing.orders.length === 2, 5000)
  const resumed = await app.inject(withKey(token, 'lost-1'))
  t.equal(resumed.statusCode, 201)
  t.match(resumed.json(), { billingOrderId: sandbox.billing.orders[1]?.id, crmOrderId: String, status: 'Pending Review' })
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 2, 'one AddOrder per key')
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending', 'Pending'])
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

t.test('AddOrder unanswered and nothing placed: retries are told 409 while it may still land, then the retry sends AddOrder again and completes it; one billing order', async (t) => {
  const { sandbox, databaseUrl, app, token } = await placementTestApp(t)
  t.equal((await app.inject(withKey(token, 'before-2'))).statusCode, 201)
  sandbox.billing.injectFault({ kind: 'blackhole', route: 'AddOrder', times: 1 })
  t.match((await app.inject(withKey(token, 'unanswered-2'))).json(), { statusCode: 503, code: 'BILLING_UNAVAILABLE' })
  const busy = await app.inject(withKey(token, 'unanswered-2'))
  t.equal(busy.statusCode, 409, 'the AddOrder sent may still land: none is sent again yet')
  t.ok(Number(busy.headers['retry-after']) >= 1, 'with retry-after')
  const completed = await untilNotInUse(app, withKey(token, 'unanswered-2'))
  t.equal(completed.statusCode, 201)
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 3, 'AddOrder sent again once the first could no longer land')
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending', 'Pending'], 'one billing order for the key')
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

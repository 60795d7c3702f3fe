import t from 'tap'
import { ORDER, placementTestApp, placementViolations, storedPlacements } from '../../../helpers/placement.js'
import { waitFor } from '../../../helpers/processes.js'
import { bearer } from '../../../helpers/tokens.js'

t.test('the CRM slow at create, past the deadline: 503 ORDER_INCOMPLETE, then the recovery finds the CRM order created late and links it', async (t) => {
  const { sandbox, databaseUrl, app, token, recovered } = await placementTestApp(t)
  // The create is held past the deadline; the CRM still makes the order once the caller has gone.
  sandbox.crm.injectFault({ kind: 'latency', route: 'rest/sobjects/Order', ms: 2000, times: 1 })
  const response = await app.inject({ ...ORDER, headers: bearer(token) })
  t.equal(response.statusCode, 503)
  t.match(response.json(), { code: 'ORDER_INCOMPLETE', message: /completes or cancels it/ })
  t.notMatch(response.body, /at |Error:|127\.0\.0\.1/, 'no stack, no host')
  const [pending] = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json().orders
  t.match(pending, { status: 'Pending Review', crmOrderId: null }, 'the order waits for the recovery')

  await recovered()
  const [linked] = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json().orders
  t.match(linked, { id: pending.id, status: 'Pending Review', crmOrderId: String, billingOrderId: pending.billingOrderId }, 'linked to the CRM order made late')
  t.equal(sandbox.crm.orders.length, 1, 'one CRM order: the recovery looked it up rather than create another')
  t.ok(sandbox.crm.calls.some((call) => call.route === 'rest/query'), 'by a SOQL query')
  t.equal(sandbox.billing.orders[0]?.status, 'Pending', 'its billing order goes on')
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

t.test('the CRM never answering the create: 503 ORDER_INCOMPLETE, then the recovery cancels the billing order and its invoice', async (t) => {
  const { sandbox, app, token, recovered } = await placementTestApp(t)
  sandbox.crm.injectFault({ kind: 'blackhole', route: 'rest/sobjects/Order', times: 1 })
  const response = await app.inject({ ...ORDER, headers: bearer(token) })
  t.match(response.json(), { statusCode: 503, code: 'ORDER_INCOMPLETE' })
  // A scrape may be answered from the last reading: each is waited for.
  const unfinished = (count: number) => waitFor(`${count} unfinished in /metrics`, async () =>
    new RegExp(`^portal_bff_order_placements_unfinished ${count}$`, 'm').test((await app.inject('/metrics')).body), 5000)
  await unfinished(1)
  await recovered()
  await unfinished(0)
  const [order] = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json().orders
  t.match(order, { status: 'Failed', failureReason: /^placement_interrupted/, crmOrderId: null })
  const [billingOrder] = sandbox.billing.orders
  t.equal(billingOrder?.status, 'Cancelled')
  t.equal(sandbox.billing.invoices.find((invoice) => invoice.id === billingOrder?.invoiceid)?.status, 'Cancelled', 'its invoice too')
  t.equal(sandbox.crm.orders.length, 0)
})

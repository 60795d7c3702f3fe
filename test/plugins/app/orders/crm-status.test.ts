import t from 'tap'
import { nextRound, placementTestApp, placementViolations, storedPlacements } from '../../../helpers/placement.js'
import { scopeWith } from '../../../helpers/app.js'
import { waitFor } from '../../../helpers/processes.js'
import { placeOrder, provisioningOutcome } from '../../../helpers/provisioning.js'
import { bearer } from '../../../helpers/tokens.js'

// One app for the file, without the platform-event subscription: the orders the CRM approves reach
// provisioning through the reconciliation alone. Rounds are run by the tests (the interval is an
// hour). The orders of one test stay for the next: each test judges its own orders.
const { app, sandbox, token, databaseUrl } = await placementTestApp(t, { CRM_EVENTS_ENABLED: 'false', ORDERS_RECONCILE_INTERVAL_S: '3600' })

interface Placed { id: string, crmOrderId: string, billingOrderId: number }
const place = async (): Promise<Placed> => await placeOrder(app, token)
const stored = async (order: Placed) => (await app.pg.query<{ status: string, crm_status: string | null, placement: string }>(
  'SELECT status, crm_status, placement FROM orders WHERE id = $1', [order.id])).rows[0]
const apiStatus = async (order: Placed) => (await app.inject({ url: `/api/orders/${order.id}`, headers: bearer(token) })).json()
const queries = () => sandbox.crm.calls.filter((call) => call.route === 'rest/query' && String(call.params?.q).startsWith('SELECT Id, Status FROM Order'))
// Read fresh first: a scrape serves a part as last read when a busy database takes over 150 ms.
const metric = async (name: string) => {
  await app.monitoring.snapshot()
  return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec((await app.inject('/metrics')).body)?.[1])
}
const billingOrder = (order: Placed) => sandbox.billing.orders.find((candidate) => candidate.id === order.billingOrderId)
const invoiceOf = (order: Placed) => sandbox.billing.invoices.find((invoice) => invoice.id === billingOrder(order)?.invoiceid)

t.test('awaiting approval: one query a round for every order, counted in /health/queues, /metrics and /status, never alerted', async (t) => {
  const [first, second] = [await place(), await place()]
  const before = { queries: queries().length, used: (await app.upstreams.crm.dailyUsage.read()).used ?? 0 }
  await nextRound(app)
  t.equal(queries().length, before.queries + 1, 'one SOQL query for both')
  t.match(queries().at(-1)?.params?.q, `SELECT Id, Status FROM Order WHERE Id IN ('${first.crmOrderId}', '${second.crmOrderId}')`, 'the ids quoted, oldest first')
  t.ok(((await app.upstreams.crm.dailyUsage.read()).used ?? 0) > before.used, 'counted in the CRM daily usage')
  t.match(await stored(first), { status: 'Pending Review', crm_status: 'Pending Review' }, 'the CRM\'s word stored for every instance')

  // Days in the CRM's queue are the CRM's people's pace, not an incident.
  await app.pg.query('UPDATE orders SET created_at = now() - interval \'4000 seconds\' WHERE id = $1', [first.id])
  const queues = (await app.inject('/health/queues')).json()
  t.match(queues.orders, { awaitingApproval: { count: 2, oldestAgeMs: Number }, approvedNotReceived: { count: 0, oldestAgeMs: null } })
  t.ok(queues.orders.awaitingApproval.oldestAgeMs >= 4_000_000, 'aged from when placed')
  t.equal(await metric('portal_bff_orders_awaiting_approval'), 2)
  t.ok(await metric('portal_bff_orders_awaiting_approval_oldest_age_seconds') >= 4000)
  t.equal(await metric('portal_bff_orders_pending'), 0, 'none approved and not received')
  t.equal(await metric('portal_bff_orders_pending_oldest_age_seconds'), 0)
  t.match((await app.inject('/status/summary')).json().orders, { awaitingApproval: { count: 2 }, approvedNotReceived: { count: 0 } })
  const alert = (await app.inject('/health/alerts')).json().alerts.find((row: { measure: string }) => row.measure === 'orders_pending_age')
  t.match(alert, { level: 'ok', value: 0, note: 'no order the CRM approved waits in Pending Review' }, 'an order awaiting approval for over an hour alerts nobody')

  // Leaves nothing waiting for the tests after this one.
  sandbox.crm.updateOrder(first.crmOrderId, { Status: 'Rejected' })
  sandbox.crm.updateOrder(second.crmOrderId, { Status: 'Cancelled' })
  await nextRound(app)
  for (const [order, crmStatus] of [[first, 'Rejected'], [second, 'Cancelled']] as const) {
    t.match(await apiStatus(order), { status: 'Cancelled', failureReason: `crm_${crmStatus}: the CRM order's Status is ${crmStatus}` }, `${crmStatus} in the CRM: Cancelled here`)
    t.equal(billingOrder(order)?.status, 'Cancelled', `${crmStatus}: its billing order cancelled`)
    t.equal(invoiceOf(order)?.status, 'Cancelled', `${crmStatus}: with its invoice`)
    t.match(await stored(order), { placement: 'compensated' })
  }
  t.match((await app.inject('/health/queues')).json().orders.awaitingApproval, { count: 0 })
})

t.test('cancelled while billing is down: Cancelled at once, its billing order cancelled by the recovery once billing answers', async (t) => {
  const order = await place()
  sandbox.crm.updateOrder(order.crmOrderId, { Status: 'Cancelled' })
  await sandbox.billing.down()
  await nextRound(app)
  t.match(await stored(order), { status: 'Cancelled', placement: 'compensating' }, 'it will never go on')
  t.equal(billingOrder(order)?.status, 'Pending', 'billing could not be told yet')
  await sandbox.billing.up()
  // Its claim run out, as it would one placement bound later.
  await app.pg.query('UPDATE orders SET placement_claimed_until = now() WHERE id = $1', [order.id])
  await nextRound(app)
  t.match(await stored(order), { status: 'Cancelled', placement: 'compensated' })
  t.equal(billingOrder(order)?.status, 'Cancelled')
  t.equal(invoiceOf(order)?.status, 'Cancelled')
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [], 'every billing order cancelled with the order the CRM cancelled, none left half-done')
})

t.test('approved but not received: provisioned through its job exactly once, though two rounds run at once and another follows; counted once', async (t) => {
  const order = await place()
  sandbox.crm.updateOrder(order.crmOrderId, { Status: 'Approved' })
  const counted = await metric('portal_bff_orders_approved_not_received_total')
  const { signal } = new AbortController()
  const { orderCrmStatus } = scopeWith(app, 'orderCrmStatus')
  await Promise.all([orderCrmStatus.run(signal), orderCrmStatus.run(signal)])
  await nextRound(app)
  await waitFor('the order Active', async () => (await apiStatus(order)).status === 'Active')
  t.match(provisioningOutcome(sandbox, [order.crmOrderId]), { activations: 1, keysUsedOnce: 1, billingAccepted: 1, crmActivated: 1 }, 'one activation, its key used once')
  await waitFor('its job completed', async () => (await app.orders.jobs.counts()).completed > 0)
  const { waiting, active, delayed, failed, completed } = await app.orders.jobs.counts()
  t.equal(waiting + active + delayed + failed + completed, 1, 'one job')
  t.equal(await metric('portal_bff_orders_approved_not_received_total'), counted + 1, 'counted once')
  t.equal(await metric('portal_bff_event_subscriber_resubscribes_total'), 0, 'no subscription to make again')
})

t.test('a CRM failure during a round leaves everything to the next round', async (t) => {
  const [approved, rejected] = [await place(), await place()]
  sandbox.crm.updateOrder(approved.crmOrderId, { Status: 'Approved' })
  sandbox.crm.updateOrder(rejected.crmOrderId, { Status: 'Rejected' })
  const counted = await metric('portal_bff_orders_approved_not_received_total')
  sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/query', times: 1 })
  await nextRound(app)
  for (const order of [approved, rejected]) t.match(await stored(order), { status: 'Pending Review', crm_status: null }, 'nothing decided, nothing stored')
  t.equal(billingOrder(rejected)?.status, 'Pending', 'no billing order cancelled')
  t.match(provisioningOutcome(sandbox, [approved.crmOrderId]), { activations: 0 }, 'nothing provisioned')
  t.equal(await metric('portal_bff_orders_approved_not_received_total'), counted, 'nothing counted')

  await nextRound(app)
  await waitFor('the approved order Active', async () => (await apiStatus(approved)).status === 'Active')
  t.match(await apiStatus(rejected), { status: 'Cancelled' })
  t.equal(billingOrder(rejected)?.status, 'Cancelled')
  t.equal(await metric('portal_bff_orders_approved_not_received_total'), counted + 1)
})

t.test('Activated in the CRM, or unknown to it: left in Pending Review for an operator, neither awaiting approval nor approved', async (t) => {
  const [activated, unknown] = [await place(), await place()]
  sandbox.crm.updateOrder(activated.crmOrderId, { Status: 'Activated' })
  await app.pg.query('UPDATE orders SET crm_order_id = $2 WHERE id = $1', [unknown.id, '801000000000000AAA'])
  await nextRound(app)
  t.match(await stored(activated), { status: 'Pending Review', crm_status: 'Activated' })
  t.match(await stored(unknown), { status: 'Pending Review', crm_status: null })
  t.match((await app.inject('/health/queues')).json().orders, { awaitingApproval: { count: 0 }, approvedNotReceived: { count: 0 } })
  t.match(provisioningOutcome(sandbox, [activated.crmOrderId]), { activations: 0 }, 'not provisioned')
})

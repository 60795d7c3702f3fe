import t from 'tap'
import { placementTestApp } from '../../../helpers/placement.js'
import { promtoolAgrees } from '../../../../dev/scripts/promtool.js'
import { skipWithout } from '../../../helpers/packages.js'
import { waitFor } from '../../../helpers/processes.js'
import { placeOrder } from '../../../helpers/provisioning.js'
import { bearer } from '../../../helpers/tokens.js'

// Contract §10a: a reconciliation that cannot ask the CRM is never blind. Rounds every second
// (ORDERS_RECONCILE_INTERVAL_S=1), without the platform-event subscription: the order the CRM
// approves reaches provisioning through the reconciliation alone.
const { app, sandbox, token } = await placementTestApp(t, { CRM_EVENTS_ENABLED: 'false', INTEGRATION_CHECK_CACHE_MS: '0' })

// Read fresh first: a scrape serves a part as last read when a busy database takes over 150 ms.
async function metrics (): Promise<string> {
  await app.monitoring.snapshot()
  return (await app.inject('/metrics')).body
}
const metric = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1])
const alertRow = async () => (await app.inject('/health/alerts')).json().alerts.find((row: { measure: string }) => row.measure === 'reconciliation_crm_failed_rounds')
const statusQueries = () => sandbox.crm.calls.filter((call) => call.route === 'rest/query' && String(call.params?.q).startsWith('SELECT Id, Status FROM Order')).length

t.test('the CRM answers 500 to the status query while an approved order waits: counted, warned within three rounds, unknown not awaiting, the CRM check failing; provisioned once it answers', async (t) => {
  sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/query' })
  const order = await placeOrder(app, token)
  sandbox.crm.updateOrder(order.crmOrderId, { Status: 'Approved' })
  const queriesBefore = statusQueries()

  const orders = (await app.inject('/health/queues')).json().orders
  t.match(orders, { unknown: { count: 1 }, awaitingApproval: { count: 0 }, approvedNotReceived: { count: 0 } }, 'its CRM status unknown: counted as unknown, never as awaiting approval')

  await waitFor('/health/alerts warns of the failed rounds', async () => (await alertRow())?.level === 'warning', 30_000)
  const asked = statusQueries() - queriesBefore
  t.ok(asked <= 4, `warned after ${asked} status queries the CRM refused: within three rounds (a fourth may be under way)`)
  const row = await alertRow()
  t.match(row, { level: 'warning', crossed: 'warning', priority: 'P2', unit: 'rounds', threshold: { warning: 2 }, note: /http_5xx/ }, 'a warning, which pages (P2), naming the failure')
  t.ok(row.value >= 3, `${String(row.value)} failed rounds in a row`)
  t.equal((await app.inject('/health/alerts')).json().level, 'warning', 'the overall level warns')

  const text = await metrics()
  t.ok(metric(text, 'portal_bff_reconciliation_crm_failed_rounds_total') >= 3, 'the failed rounds counted in /metrics')
  t.ok(metric(text, 'portal_bff_reconciliation_crm_failed_rounds_in_row') >= 3, 'and their run')
  t.equal(metric(text, 'portal_bff_orders_crm_status_unknown'), 1, 'the order counted as unknown in /metrics')
  t.equal(metric(text, 'portal_bff_orders_awaiting_approval'), 0, 'not as awaiting approval')
  await t.test('the shipped rules, fed this scrape, fire the warning', { skip: skipWithout(['promtool']) }, async (t) => {
    const rules = await promtoolAgrees(text, 'reconciliation_crm_failed_rounds', 'warning')
    t.ok(rules.agrees, 'promtool test rules passes on the scrape', { output: rules.output })
  })

  const health = await app.inject('/auth/health-check')
  t.equal(health.statusCode, 503, '/auth/health-check fails')
  t.match(health.json().checks.crm, { status: 'fail', error: 'http_5xx' }, 'the CRM failing, though its limits probe answers', { health: health.json() })

  sandbox.crm.clearFaults()
  await waitFor('the approved order Active', async () => (await app.inject({ url: `/api/orders/${order.id as string}`, headers: bearer(token) })).json().status === 'Active', 30_000)
  await waitFor('the warning ends', async () => (await alertRow())?.level === 'ok', 15_000)
  t.match(await alertRow(), { level: 'ok', value: 0 })
  t.match((await app.inject('/health/queues')).json().orders, { unknown: { count: 0 }, approvedNotReceived: { count: 0 } })
  t.equal(metric(await metrics(), 'portal_bff_reconciliation_crm_failed_rounds_in_row'), 0, 'the run ended')
  t.match((await app.inject('/auth/health-check')).json().checks.crm, { status: 'ok' }, 'the CRM check ok once its calls succeed')
})

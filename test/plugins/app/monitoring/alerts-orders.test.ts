import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../../../helpers/app.js'
import { expectLevel, scrapeHolding } from '../../../helpers/alerts.js'
import { approvedAgo, awaitingApproval } from '../../../helpers/provisioning.js'
import { bearer, login } from '../../../helpers/tokens.js'

// The specification's incident, judged by the CRM's word: orders it approved stay in Pending Review.

async function placeOrder (app: FastifyInstance): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(await login(app)), payload: { productId: 1, billingCycle: 'monthly' } })
  if (response.statusCode !== 201) throw new Error(`order not placed: ${response.body}`)
  return response.json().id
}

const ageOrder = (app: FastifyInstance, id: string, seconds: number) =>
  app.pg.query('UPDATE orders SET created_at = now() - make_interval(secs => $2) WHERE id = $1', [id, seconds])

const metricsOf = async (app: FastifyInstance) => (await scrapeHolding(app, [/^portal_bff_orders_pending /m])).body

t.test('only the orders the CRM approved are judged, from when they were found approved; orders awaiting approval never; /metrics and the rules agree', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'false' })
  const none = await expectLevel(t, app, 'orders_pending_age', 'ok', 'no order waits')
  t.match(none, { value: 0, note: 'no order the CRM approved waits in Pending Review' })
  const awaiting = await placeOrder(app)
  await ageOrder(app, awaiting, 5000)
  await awaitingApproval(app, awaiting)
  const approved = await placeOrder(app)
  await ageOrder(app, approved, 5000)
  await approvedAgo(app, approved, 100)
  await expectLevel(t, app, 'orders_pending_age', 'ok', 'an order awaiting approval for 5000 s, and one placed 5000 s ago approved 100 s ago')
  await approvedAgo(app, approved, 1000)
  await expectLevel(t, app, 'orders_pending_age', 'warning', 'approved 1000 s ago (> 900)')
  await approvedAgo(app, approved, 4000)
  const critical = await expectLevel(t, app, 'orders_pending_age', 'critical', 'approved 4000 s ago (> 3600)')
  t.match(critical, { priority: 'P2', unit: 'seconds' })
  const metrics = await metricsOf(app)
  t.match(metrics, /^portal_bff_orders_pending 1$/m, 'the approved order counted')
  t.match(metrics, /^portal_bff_orders_pending_oldest_age_seconds 4\d{3}$/m, 'its age since approval (4000 s), not since placed (5000 s)')
  t.match(metrics, /^portal_bff_orders_awaiting_approval 1$/m, 'the other counted apart')
  t.ok(Number(/^portal_bff_orders_awaiting_approval_oldest_age_seconds (\d+)$/m.exec(metrics)?.[1]) >= 5000, 'aged from when placed')
  t.match(metrics, /^portal_bff_orders_pending_age_warning_seconds 900$/m, 'the limits the rules compare with')
  t.match(metrics, /^portal_bff_orders_pending_age_critical_seconds 3600$/m)
})

t.test('ORDERS_PENDING_WARNING_S and ORDERS_PENDING_CRITICAL_S move the row\'s limits, the gauges and so the shipped rules', async (t) => {
  const app = await buildTestApp(t, { ORDERS_PENDING_WARNING_S: '60', ORDERS_PENDING_CRITICAL_S: '120' })
  const metrics = await metricsOf(app)
  t.match(metrics, /^portal_bff_orders_pending_age_warning_seconds 60$/m)
  t.match(metrics, /^portal_bff_orders_pending_age_critical_seconds 120$/m)
  const id = await placeOrder(app)
  await approvedAgo(app, id, 90)
  const row = await expectLevel(t, app, 'orders_pending_age', 'warning', 'approved 90 s ago (> 60, far below the default 900)')
  t.match(row, { threshold: { warning: 60, critical: 120 } })
})

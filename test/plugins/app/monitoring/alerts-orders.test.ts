import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../../../helpers/app.js'
import { expectLevel } from '../../../helpers/alerts.js'
import { bearer, login } from '../../../helpers/tokens.js'

// The specification's incident: platform events stop, and orders stay in Pending Review.

async function placeOrder (app: FastifyInstance): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(await login(app)), payload: { productId: 1, billingCycle: 'monthly' } })
  if (response.statusCode !== 201) throw new Error(`order not placed: ${response.body}`)
  return response.json().id
}

const ageOrder = (app: FastifyInstance, id: string, seconds: number) =>
  app.pg.query('UPDATE orders SET created_at = now() - make_interval(secs => $2) WHERE id = $1', [id, seconds])

t.test('events disabled and an order past the critical age: the pending-orders row is critical, and /metrics and the rules agree', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'false' })
  const none = await expectLevel(t, app, 'orders_pending_age', 'ok', 'no order waits')
  t.match(none, { value: 0, note: 'no order waits in Pending Review' })
  const id = await placeOrder(app)
  await expectLevel(t, app, 'orders_pending_age', 'ok', 'an order placed a moment ago')
  await ageOrder(app, id, 1000)
  await expectLevel(t, app, 'orders_pending_age', 'warning', 'the oldest has waited 1000 s (> 900)')
  await ageOrder(app, id, 4000)
  const critical = await expectLevel(t, app, 'orders_pending_age', 'critical', 'the oldest has waited 4000 s (> 3600)')
  t.match(critical, { priority: 'P2', unit: 'seconds' })
  const metrics = (await app.inject('/metrics')).body
  t.match(metrics, /^portal_bff_orders_pending 1$/m, 'the count')
  t.match(metrics, /^portal_bff_orders_pending_oldest_age_seconds 400\d$/m, 'the age of the oldest')
})

t.test('ORDERS_PENDING_WARNING_S and ORDERS_PENDING_CRITICAL_S move the row\'s limits', async (t) => {
  const app = await buildTestApp(t, { ORDERS_PENDING_WARNING_S: '60', ORDERS_PENDING_CRITICAL_S: '120' })
  await ageOrder(app, await placeOrder(app), 90)
  const row = (await app.inject('/health/alerts')).json().alerts.find((alert: { measure: string }) => alert.measure === 'orders_pending_age')
  t.match(row, { level: 'warning', threshold: { warning: 60, critical: 120 } })
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox, tempDir } from '../../../helpers/app.js'
import { waitFor } from '../../../helpers/processes.js'
import { bearer, login } from '../../../helpers/tokens.js'

t.test('a subscription that stays connected but receives nothing: the stuck order is provisioned without a restart, by a resubscription from the stored position', async (t) => {
  const sandbox = await startTestSandbox(t)
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true', ORDERS_PENDING_WARNING_S: '2', ORDERS_PENDING_CRITICAL_S: '60', LOG_DIR: logDir }, sandbox)
  const token = await login(app)
  const place = async () => (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })).json() as { crmOrderId: string }
  const status = async (crmOrderId: string) => (await app.orders.findByCrmId(crmOrderId))?.status
  await waitFor('the subscription', async () => app.eventSubscription.stats().state === 'connected')

  // One order through, so that a replay position is stored.
  const first = await place()
  sandbox.crm.publishOrderProvisionRequested(first.crmOrderId)
  await waitFor('the first order Active', async () => await status(first.crmOrderId) === 'Active')

  sandbox.crm.muteEventDelivery(true)
  const stuck = await place()
  sandbox.crm.publishOrderProvisionRequested(stuck.crmOrderId)
  await new Promise((resolve) => setTimeout(resolve, 1000))
  t.equal(await status(stuck.crmOrderId), 'Pending Review', 'the event does not arrive: the stream looks connected and is silent')
  t.equal(app.eventSubscription.stats().state, 'connected')

  // Still muted: only a new subscription's replay from the stored position can bring the event.
  await waitFor('the stuck order Active', async () => await status(stuck.crmOrderId) === 'Active', 15_000)
  t.pass('provisioned without a restart')
  t.match((await app.inject('/metrics')).body, /^portal_bff_event_subscriber_resubscribes_total 1$/m, 'once, counted')
  await app.close()
  const lines = readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)
  t.match(lines.filter((line) => String(line.message).includes('subscribing again from the stored replay position')), [{ level: 40, pendingOrders: 1 }], 'said once, at warn')
})

t.test('with no stored replay position, an event published to a muted session is provisioned through the heal, which replays every retained event', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true', ORDERS_PENDING_WARNING_S: '2', ORDERS_PENDING_CRITICAL_S: '60' }, sandbox)
  const token = await login(app)
  await waitFor('the subscription', async () => app.eventSubscription.stats().state === 'connected')
  t.equal(await app.redis.get(app.eventSubscription.replayKey), null, 'a fresh deployment: no replay position stored')

  sandbox.crm.muteEventDelivery(true)
  const stuck = (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })).json() as { crmOrderId: string }
  sandbox.crm.publishOrderProvisionRequested(stuck.crmOrderId)
  // Still muted: a subscription from -1 would never see it; only a replay of every retained event can.
  await waitFor('the stuck order Active', async () => (await app.orders.findByCrmId(stuck.crmOrderId))?.status === 'Active', 15_000)
  t.pass('provisioned through the heal')
  t.ok(await app.redis.get(app.eventSubscription.replayKey), 'the position is stored once the replayed event is handed off')
})

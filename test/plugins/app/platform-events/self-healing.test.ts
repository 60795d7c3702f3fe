import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox, tempDir } from '../../../helpers/app.js'
import { waitFor } from '../../../helpers/processes.js'
import { EVENTS_ON, placeOrder, provisioningOutcome } from '../../../helpers/provisioning.js'
import { login } from '../../../helpers/tokens.js'

t.test('a subscription that stays connected but receives nothing: the reconciliation provisions the orders the CRM approved, and the subscription is made again, replaying every retained event when no position is stored, at most once a warning period', async (t) => {
  const sandbox = await startTestSandbox(t)
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { ...EVENTS_ON, ORDERS_RECONCILE_INTERVAL_S: '1', LOG_DIR: logDir }, sandbox)
  const token = await login(app)
  await waitFor('the subscription', async () => app.platformEvents.subscription.stats().state === 'connected')
  t.equal(await app.redis.get(app.platformEvents.subscription.replayKey), null, 'a fresh deployment: no replay position stored')

  sandbox.crm.muteEventDelivery(true)
  const stuck = await placeOrder(app, token) as { crmOrderId: string }
  sandbox.crm.updateOrder(stuck.crmOrderId, { Status: 'Approved' })
  const replayId = sandbox.crm.publishOrderProvisionRequested(stuck.crmOrderId)
  t.equal(app.platformEvents.subscription.stats().state, 'connected', 'the stream looks connected, and is silent')

  // Still muted: the order reaches provisioning through the reconciliation, and the event through a
  // new subscription's replay of every retained event (one from -1 would never see it).
  await waitFor('the stuck order Active', async () => (await app.orders.store.findByCrmId(stuck.crmOrderId))?.status === 'Active')
  await waitFor('the replayed event handed off', async () => Number(await app.redis.get(app.platformEvents.subscription.replayKey)) >= replayId)
  t.match(provisioningOutcome(sandbox, [stuck.crmOrderId]), { activations: 1, keysUsedOnce: 1 }, 'provisioned once, though both brought it')
  const metrics = (await app.inject('/metrics')).body
  t.match(metrics, /^portal_bff_event_subscriber_resubscribes_total 1$/m, 'subscribed again once, counted')
  t.match(metrics, /^portal_bff_orders_approved_not_received_total 1$/m, 'the order counted')

  // Within ORDERS_PENDING_WARNING_S (900 s), another: provisioned by the reconciliation, without
  // another resubscription, so its muted event stays undelivered.
  const next = await placeOrder(app, token) as { crmOrderId: string }
  sandbox.crm.updateOrder(next.crmOrderId, { Status: 'Approved' })
  const nextReplayId = sandbox.crm.publishOrderProvisionRequested(next.crmOrderId)
  await waitFor('the next order Active', async () => (await app.orders.store.findByCrmId(next.crmOrderId))?.status === 'Active')
  await new Promise((resolve) => setTimeout(resolve, 1.5 * app.platformEvents.subscription.renewEveryMs))
  t.match((await app.inject('/metrics')).body, /^portal_bff_event_subscriber_resubscribes_total 1$/m, 'not subscribed again within the warning period')
  t.ok(Number(await app.redis.get(app.platformEvents.subscription.replayKey)) < nextReplayId, 'its event not replayed')
  await app.close()
  const lines = readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)
  const approved = lines.filter((line) => String(line.message).startsWith('the CRM approved an order whose platform event has not arrived'))
  t.equal(approved.length, 2, 'said once an order')
  t.match(approved, [{ level: 40, correlationId: `order:${stuck.crmOrderId}`, crmOrderId: stuck.crmOrderId, crmStatus: 'Approved' }, { crmOrderId: next.crmOrderId }], 'at warn, under the order\'s id')
  const resubscribed = lines.filter((line) => String(line.message).includes('subscribing again from the stored replay position'))
  t.equal(resubscribed.length, 1, 'subscribing again said once')
  t.match(resubscribed, [{ level: 40 }], 'at warn')
})

import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { BillingClient } from '../../../../integrations/billing/client.js'
import { HandOffRefused } from '../../../../plugins/app/platform-events/parked-events.js'
import { buildTestApp, startTestSandbox } from '../../../helpers/app.js'
import { skipWithout } from '../../../helpers/packages.js'
import { portalBrowser } from '../../../helpers/portal-browser.js'
import { waitFor } from '../../../helpers/processes.js'
import { allActive, EVENTS_ON, eventsReport, provisioningOutcome, seedCrmOrders, STREAMING } from '../../../helpers/provisioning.js'
import type { Sandbox } from '../../../../dev/sandbox/index.js'

const OPS_TOKEN = 'ops-token-for-parked-events-tests'
const ops = { authorization: `Bearer ${OPS_TOKEN}` }

async function connected (app: FastifyInstance, sandbox: Sandbox) {
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected' && sandbox.crm.streamingStats.subscribes > 0, 10_000)
}

async function parkedList (app: FastifyInstance) {
  const response = await app.inject({ url: '/health/events/parked', headers: ops })
  if (response.statusCode !== 200) throw new Error(`GET /health/events/parked: ${response.statusCode} ${response.body}`)
  return response.json() as { total: number, events: Array<{ id: string, crmOrderId: string, reason: string, detail: string, replayId: number, retries: number }> }
}

/** A billing order of client 1, as a portal placement leaves it. */
async function billingOrder (sandbox: Sandbox): Promise<number> {
  const billing = new BillingClient({ url: sandbox.settings.BILLING_API_URL!, identifier: sandbox.settings.BILLING_API_IDENTIFIER!, secret: sandbox.settings.BILLING_API_SECRET! })
  try {
    return (await billing.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })).orderId
  } finally {
    await billing.close()
  }
}

/** The parked count as the status page shows it, in headless Chromium, and its level. */
async function shownOnStatusPage (t: Test, app: FastifyInstance): Promise<string> {
  const browser = await portalBrowser(t, { httpCredentials: { username: 'ops', password: OPS_TOKEN } })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const page = await browser.newPage()
  await page.goto(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/status`)
  await page.waitForSelector('body[data-loaded="true"]', { timeout: 10_000 })
  const row = page.locator('#subscriber dt', { hasText: 'parked' }).locator('xpath=following-sibling::dd[1]')
  return `${await row.textContent() ?? ''} ${await row.getAttribute('data-level') ?? ''}`
}

t.test('events that cannot be handed off are parked, counted and shown; later orders are provisioned; the stream does not loop', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, OPS_TOKEN }, sandbox)
  await connected(app, sandbox)
  const [first, ...later] = await seedCrmOrders(sandbox, 4) as [string, ...string[]]
  sandbox.crm.publishOrderProvisionRequested(first)
  await waitFor('the first order Active', () => allActive(app, [first]), 30_000)

  const fields = { Status: 'Pending Review', BillingClientId__c: '1', Product__c: '1' }
  const reusing = sandbox.crm.putOrder({ ...fields, Name: 'reuses a billing order', BillingOrderId__c: sandbox.crm.order(first)!.BillingOrderId__c })
  const incomplete = sandbox.crm.putOrder({ ...fields, Name: 'no billing order' })
  const unknown = '801000000000999AAA'
  const before = sandbox.crm.streamingStats
  for (const id of [reusing, incomplete, unknown]) sandbox.crm.publishOrderProvisionRequested(id)
  let lastReplayId = 0
  for (const id of later) lastReplayId = sandbox.crm.publishOrderProvisionRequested(id)

  await waitFor('the orders published after them Active', () => allActive(app, later), 30_000)
  t.same(provisioningOutcome(sandbox, later), { activations: 3, distinctKeys: 3, keysUsedOnce: 3, billingAccepted: 3, crmActivated: 3 })
  await waitFor('the replay position past all of them', async () => (await app.redis.get(app.platformEvents.subscription.replayKey)) === String(lastReplayId))

  const { total, events } = await parkedList(app)
  t.equal(total, 3, 'three parked')
  t.match(Object.fromEntries(events.map((event) => [event.crmOrderId, event])), {
    [reusing]: { reason: 'billing_order_conflict', detail: /another order has/ },
    [incomplete]: { reason: 'order_incomplete', detail: /BillingOrderId__c/ },
    [unknown]: { reason: 'order_unknown', detail: /does not have/ }
  }, 'each with its reason')
  for (const id of [reusing, incomplete, unknown]) t.equal(await app.orders.store.findByCrmId(id), null, `nothing stored for ${id}`)
  t.equal((await app.pg.query('SELECT count(*)::int AS count FROM orders WHERE billing_order_id = $1', [Number(sandbox.crm.order(first)!.BillingOrderId__c)])).rows[0].count, 1, 'the reused billing order stays with its own order')

  t.equal((await eventsReport(app)).parked, 3, '/health/queues counts them in its events section')
  await waitFor('the count in /metrics', async () => /^portal_bff_events_parked 3$/m.test((await app.inject({ url: '/metrics', headers: ops })).body))
  t.equal((await app.inject({ url: '/status/summary', headers: ops })).json().subscriber.parked, 3, '/status/summary counts them')

  // Several long polls (1 s each) later: no refused batch, so no loop of handshakes and subscribes.
  await sleep(3000)
  const after = sandbox.crm.streamingStats
  t.ok(after.handshakes - before.handshakes <= 2, `${after.handshakes - before.handshakes} handshakes while they are parked`)
  t.ok(after.subscribes - before.subscribes <= 2, `${after.subscribes - before.subscribes} subscribes while they are parked`)
  // A long poll that a busy machine lets time out is the transport's, not a refusal of the batch.
  t.not((await eventsReport(app)).lastError, 'events_rejected', 'set aside, never refused: no batch came back')
})

t.test('the status page shows the parked count, as a warning, in headless Chromium', { skip: skipWithout(['chromium']) }, async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, OPS_TOKEN }, sandbox)
  for (const [index, reason] of (['order_unknown', 'order_incomplete', 'billing_order_conflict'] as const).entries()) {
    const crmOrderId = `80100000000099${index}AAA`
    const event = { channel: '/event/OrderProvisionRequested__e', data: { schema: 'planted', payload: { OrderId__c: crmOrderId }, event: { replayId: index + 1 } } }
    await app.platformEvents.parked.park(event.channel, crmOrderId, event, new HandOffRefused(reason, 'planted by the test'))
  }
  t.equal((await parkedList(app)).total, 3, 'three parked')
  t.match(await shownOnStatusPage(t, app), /^3 warning$/, 'the status page shows the count, as a warning')
})

t.test('an operator retry after the data is mended provisions the order once; a refused retry keeps it parked', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, OPS_TOKEN }, sandbox)
  await connected(app, sandbox)
  const incomplete = sandbox.crm.putOrder({ Name: 'no billing order yet', Status: 'Pending Review', BillingClientId__c: '1', Product__c: '1' })
  sandbox.crm.publishOrderProvisionRequested(incomplete)
  await waitFor('the event parked', async () => (await parkedList(app)).total === 1, 15_000)
  const { id } = (await parkedList(app)).events[0]!

  t.equal((await app.inject({ method: 'POST', url: `/health/events/parked/${id}/retry` })).statusCode, 401, 'behind OPS_TOKEN')
  const refused = await app.inject({ method: 'POST', url: `/health/events/parked/${id}/retry`, headers: ops })
  t.equal(refused.statusCode, 409, 'not mended yet: refused again')
  t.match(refused.json(), { code: 'PARKED_EVENT_REFUSED', message: /order_incomplete/ })
  t.match((await parkedList(app)).events, [{ id, retries: 1 }], 'still parked, the retry counted')

  // Mended in the CRM, through its REST API, as an administrator would.
  const billingOrderId = await billingOrder(sandbox)
  await app.upstreams.crm.client.updateOrder(incomplete, { BillingOrderId__c: String(billingOrderId) })
  const [retried, again] = await Promise.all([1, 2].map(() => app.inject({ method: 'POST', url: `/health/events/parked/${id}/retry`, headers: ops })))
  const answers = [retried!, again!].map((response) => response.statusCode).sort()
  t.ok(answers.includes(200) && answers.every((status) => status === 200 || status === 404), `two retries at once: handed off, then not parked any more (${answers.join(', ')})`)
  t.match([retried!, again!].find((response) => response.statusCode === 200)?.json(), { crmOrderId: incomplete, orderId: String, status: 'Pending Review' })

  await waitFor('the order Active', () => allActive(app, [incomplete]), 30_000)
  t.equal((await parkedList(app)).total, 0, 'no longer parked')
  t.equal((await app.inject({ method: 'POST', url: `/health/events/parked/${id}/retry`, headers: ops })).json().code, 'PARKED_EVENT_NOT_FOUND')
  // The same event again (the CRM replays it): still one job.
  sandbox.crm.publishOrderProvisionRequested(incomplete)
  await waitFor('the replay handed off', async () => (await eventsReport(app)).received >= 2)
  await waitFor('the jobs settled', async () => (await app.inject('/health/queues')).json().jobs.active === 0)
  t.same(provisioningOutcome(sandbox, [incomplete]), { activations: 1, distinctKeys: 1, keysUsedOnce: 1, billingAccepted: 1, crmActivated: 1 }, 'provisioned once')
  t.match((await app.inject('/health/queues')).json().jobs, { completed: 1, failed: 0 })
})

t.test('an operator discards a parked event that will never be handed off', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, OPS_TOKEN }, sandbox)
  await connected(app, sandbox)
  sandbox.crm.publishOrderProvisionRequested('801000000000998AAA')
  await waitFor('the event parked', async () => (await parkedList(app)).total === 1, 15_000)
  const { id } = (await parkedList(app)).events[0]!
  t.equal((await app.inject({ method: 'DELETE', url: `/health/events/parked/${id}` })).statusCode, 401, 'behind OPS_TOKEN')
  t.equal((await app.inject({ method: 'DELETE', url: `/health/events/parked/${id}`, headers: ops })).statusCode, 204)
  t.equal((await app.inject({ method: 'DELETE', url: `/health/events/parked/${id}`, headers: ops })).statusCode, 404, 'gone')
  t.equal((await app.inject({ method: 'POST', url: '/health/events/parked/x/retry', headers: ops })).statusCode, 400, 'an id is a number')
  t.equal((await eventsReport(app)).parked, 0)
})

t.test('a portal order whose CRM id was never stored is linked by its event, not parked as a conflict', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, OPS_TOKEN }, sandbox)
  await connected(app, sandbox)
  const [crmOrderId] = await seedCrmOrders(sandbox, 1) as [string]
  const billingOrderId = Number(sandbox.crm.order(crmOrderId)!.BillingOrderId__c)
  // A placement interrupted after the CRM create: the row has its billing order, not its CRM id.
  const placed = await app.orders.store.create({ billingClientId: 1, productId: '1', billingCycle: 'monthly', billingOrderId, crmOrderId: null })
  sandbox.crm.publishOrderProvisionRequested(crmOrderId)
  await waitFor('the order Active', () => allActive(app, [crmOrderId]), 30_000)
  t.equal((await app.orders.store.findByCrmId(crmOrderId))?.id, placed.id, 'the portal\'s own row, linked')
  t.equal((await app.pg.query('SELECT count(*)::int AS count FROM orders')).rows[0].count, 1, 'no second row')
  t.equal((await parkedList(app)).total, 0, 'nothing parked')
  t.same(provisioningOutcome(sandbox, [crmOrderId]), { activations: 1, distinctKeys: 1, keysUsedOnce: 1, billingAccepted: 1, crmActivated: 1 })
})

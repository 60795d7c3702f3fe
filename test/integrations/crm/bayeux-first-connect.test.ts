import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { PlatformEventSubscriber } from '../../../integrations/crm/bayeux.js'
import { ORDER_PROVISION_CHANNEL, startSandbox, type CrmSimulator, type StreamingOptions } from '../../../dev/sandbox/index.js'
import { sandboxCrmClient } from '../../helpers/integrations.js'
import { before } from '../../helpers/before.js'

// Bayeux: a client subscribes once connected. These tests watch the order of the messages the
// subscriber sends, against a CometD-like server and against one that holds the first connect.

async function until (condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
}

/** A sandbox and a subscriber from new events on, both closed at the end of the test. */
async function subscribed (t: Test, streaming: StreamingOptions, arrange?: (crm: CrmSimulator) => void) {
  const sandbox = await startSandbox({ crm: { streaming } })
  arrange?.(sandbox.crm)
  const redis = new Redis({ lazyConnect: true })
  const salesforce = sandboxCrmClient(sandbox.settings, redis)
  const received: number[] = []
  const subscriber = new PlatformEventSubscriber({
    crm: { session: signal => salesforce.session(signal), invalidateSession: refused => salesforce.invalidateSession(refused) },
    apiVersion: '60.0',
    channel: ORDER_PROVISION_CHANNEL,
    replayFrom: async () => -1,
    onPlatformEvents: async events => { received.push(...events.map(event => event.data.event.replayId)) }
  })
  const stopped = subscriber.start()
  t.teardown(async () => {
    await subscriber.stop()
    await stopped
    await salesforce.close()
    await sandbox.close()
    redis.disconnect()
  })
  await until(() => subscriber.stats().state === 'connected', 'the subscription')
  const messages = () => sandbox.crm.calls
    .filter(call => call.route.startsWith('cometd/'))
    .map(call => (call.params?.messages as Array<Record<string, unknown>>)[0]!)
  return { crm: sandbox.crm, received, messages }
}

t.test('handshake, then a connect that asks for an answer at once, then subscribe once it is answered', async t => {
  const { crm, received, messages } = await subscribed(t, { connectTimeoutMs: 500 })
  const [handshake, firstConnect, subscribe] = messages()
  t.match(handshake, { channel: '/meta/handshake' })
  t.match(firstConnect, { channel: '/meta/connect', connectionType: 'long-polling', advice: { timeout: 0 } })
  t.match(subscribe, { channel: '/meta/subscribe', subscription: ORDER_PROVISION_CHANNEL })
  t.notOk('advice' in messages().at(-1)!, 'the long polls after it take the server\'s advice')
  const replayId = crm.publishOrderProvisionRequested('801FIRST')
  await until(() => received.includes(replayId), 'the event')
})

t.test('a server that holds the first connect gets the subscribe beside it, and delivers on it', async t => {
  const holdMs = 10_000
  const { crm, received, messages } = await subscribed(t, { connectTimeoutMs: holdMs, holdFirstConnect: true })
  t.same(messages().map(message => message.channel), ['/meta/handshake', '/meta/connect', '/meta/subscribe'], 'the first connect is still held')
  const replayId = crm.publishOrderProvisionRequested('801HELD')
  const delivered = until(() => received.includes(replayId), 'the event', 3 * holdMs).then(() => true)
  t.ok(await before(holdMs, delivered), 'delivered on the held connect, before its timeout')
})

t.test('a session that fails while its first connect is held takes that connect down with it', async t => {
  const { crm } = await subscribed(t, { connectTimeoutMs: 10_000, holdFirstConnect: true }, simulator => {
    simulator.injectFault({ kind: 'error', route: 'cometd/meta/subscribe', message: '500::Subscribe failed', times: 1 })
  })
  t.equal(crm.calls.filter(call => call.route === 'cometd/meta/handshake').length, 2, 'the second session subscribed')
  await until(() => crm.callsInProgress === 1, 'only the second session\'s connect held', 2000)
  t.pass('the first session\'s held connect was abandoned with it')
})

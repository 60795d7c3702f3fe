import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { PlatformEventSubscriber, type PlatformEventSubscriberOptions, type SubscriberState } from '../../../integrations/crm/bayeux.js'
import { ORDER_PROVISION_CHANNEL, startSandbox, type CrmSimulator, type StreamingOptions } from '../../../dev/sandbox/index.js'
import { recorder, sandboxCrmClient } from '../../helpers/integrations.js'

// What real Bayeux servers (Faye) showed: an Unknown client under 401, a second restart soon after a
// recovery, events without a replayId, and a handshake that grants no replay extension.

const BACKOFF = { initialMs: 200, maxMs: 1000 }

async function until (condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

/** A sandbox with these streaming options and a subscriber of it, both closed at the end of the test. */
async function subscribed (t: Test, streaming: StreamingOptions,
  options: Partial<PlatformEventSubscriberOptions> & { from?: number, arrange?: (crm: CrmSimulator) => void } = {}) {
  const sandbox = await startSandbox({ crm: { streaming } })
  const { crm } = sandbox
  const { from = -1, arrange, ...rest } = options
  arrange?.(crm)
  const redis = new Redis({ lazyConnect: true })
  const salesforce = sandboxCrmClient(sandbox.settings, redis)
  const recorded = recorder()
  const received: number[] = []
  const states: SubscriberState[] = []
  const invalidated: string[] = []
  const subscriber = new PlatformEventSubscriber({
    crm: {
      session: signal => salesforce.session(signal),
      invalidateSession: refused => {
        invalidated.push(refused.accessToken)
        salesforce.invalidateSession(refused)
      }
    },
    apiVersion: '60.0',
    channel: ORDER_PROVISION_CHANNEL,
    replayFrom: async () => received.at(-1) ?? from,
    onPlatformEvents: async events => { received.push(...events.map(event => event.data.event.replayId)) },
    onState: state => { states.push(state) },
    log: recorded.log,
    connectTimeoutMarginMs: 500,
    backoff: BACKOFF,
    ...rest
  })
  const stopped = subscriber.start()
  t.teardown(async () => {
    await subscriber.stop()
    await stopped
    await salesforce.close()
    await sandbox.close()
    redis.disconnect()
  })
  const handshakes = (): number => crm.calls.filter(call => call.route === 'cometd/meta/handshake').length
  const tokenCalls = (): number => crm.calls.filter(call => call.route === 'oauth/token').length
  const connected = () => until(() => subscriber.stats().state === 'connected', 'the subscription')
  await connected()
  return { crm, subscriber, received, states, invalidated, lines: recorded.lines, handshakes, tokenCalls, connected }
}

t.test('an Unknown client error under 401 (as Faye sends it) handshakes again with the same token', async t => {
  const stream = await subscribed(t, { connectTimeoutMs: 500 })
  const tokens = stream.tokenCalls()
  stream.crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '401:f8k2ab:Unknown client', reconnect: 'handshake', times: 1 })
  await until(() => stream.subscriber.stats().reconnects === 1, 'a new handshake')
  await stream.connected()
  t.equal(stream.subscriber.stats().lastError, 'unknown_client')
  t.equal(stream.tokenCalls(), tokens, 'no new token minted')
  t.same(stream.invalidated, [], 'the session was kept')
  const event = stream.crm.publishOrderProvisionRequested('801UNKNOWN')
  await until(() => stream.received.includes(event), 'an event after the new handshake')

  stream.crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '401::Authentication invalid', reconnect: 'none', times: 1 })
  await until(() => stream.subscriber.stats().reconnects === 2, 'a handshake after the refused token')
  t.equal(stream.subscriber.stats().lastError, 'auth_failed', 'a 401 that names no unknown client is still a refused token')
  t.equal(stream.invalidated.length, 1)
})

t.test('a subscribe alone does not reset the backoff; a batch handed off does: a restart after it handshakes at once', async t => {
  // Three failed handshakes in a row, then a session that subscribes: a server that takes the
  // subscribe and drops the client at once must not be handshaken in a loop.
  const stream = await subscribed(t, { connectTimeoutMs: 20_000 }, {
    backoff: { initialMs: 200, maxMs: 5000 },
    arrange: crm => crm.injectFault({ kind: 'http5xx', route: 'cometd/meta/handshake', status: 503, times: 3 })
  })
  t.same(stream.states, ['connecting', 'failed', 'connecting', 'failed', 'connecting', 'failed', 'connecting', 'connected'])
  stream.crm.dropAllSessions()
  await until(() => stream.handshakes() === 5 && stream.subscriber.stats().state === 'connected', 'the handshake after the restart')
  t.same(stream.states.slice(8), ['failed', 'connecting', 'connected'], 'backed off: only the subscribe said the session was healthy')

  // A batch handed off proves the stream healthy: the next restart handshakes at once.
  const event = stream.crm.publishOrderProvisionRequested('801HANDEDOFF')
  await until(() => stream.received.includes(event), 'the event handed off')
  stream.crm.dropAllSessions()
  await until(() => stream.handshakes() === 6 && stream.subscriber.stats().state === 'connected', 'the handshake after the second restart')
  t.same(stream.states.slice(11), ['connecting', 'connected'], 'no backoff after a batch was handed off')
  t.ok(stream.lines.some(line => line.level === 'info' && /handshaking again/.test(line.message) && line.details.failure === 'unknown_client'))
})

t.test('a batch refused again and again: the backoff doubles, each session given up is disconnected before the next handshake', async t => {
  let refusing = true
  const accepted: number[] = []
  const stream = await subscribed(t, { connectTimeoutMs: 500 }, {
    backoff: { initialMs: 50, maxMs: 400 },
    // The jitter at its top: each wait is the backoff's bound.
    random: () => 1,
    replayFrom: async () => accepted.at(-1) ?? -2,
    onPlatformEvents: async events => {
      if (refusing) throw new Error('the database is unavailable')
      accepted.push(...events.map(event => event.data.event.replayId))
    }
  })
  const handshakes = stream.handshakes()
  const event = stream.crm.publishOrderProvisionRequested('801REFUSED')
  const waits = () => stream.lines.filter(line => line.level === 'warn' && line.details.failure === 'events_rejected').map(line => line.details.retryInMs)
  await until(() => waits().length >= 5, 'five refusals')
  t.same(waits().slice(0, 5), [50, 100, 200, 400, 400], 'doubling up to the longest backoff, not reset by each subscribe')
  const { disconnects } = stream.crm.streamingStats
  t.ok(disconnects >= stream.handshakes() - handshakes - 1, `every session given up was disconnected (${disconnects} disconnects, ${stream.handshakes() - handshakes} handshakes)`)
  t.ok(stream.crm.streamingClientCount <= 1, 'the server keeps no abandoned client')

  refusing = false
  await until(() => accepted.includes(event), 'the batch handed off')
  refusing = true
  const next = stream.crm.publishOrderProvisionRequested('801REFUSEDAGAIN')
  await until(() => waits().length >= 6, 'the next refusal')
  t.equal(waits()[5], 50, 'the batch handed off reset the backoff')
  refusing = false
  await until(() => accepted.includes(next), 'the next batch handed off')
})

t.test('every event without a replayId is counted as dropped, with a short code in lastError', async t => {
  const stream = await subscribed(t, { connectTimeoutMs: 500, malformedEventsLack: 'replayId' })
  stream.crm.publishMalformedEvent()
  stream.crm.publishMalformedEvent()
  const event = stream.crm.publishOrderProvisionRequested('801AFTER')
  await until(() => stream.received.includes(event), 'the next event')
  t.same(stream.received, [event])
  t.match(stream.subscriber.stats(), { state: 'connected', dropped: 2, received: 1, reconnects: 0, lastError: 'event_without_replay_id' })
  t.equal(stream.lines.filter(line => line.level === 'error' && line.details.failure === 'event_without_replay_id').length, 2)
})

t.test('a handshake without the replay extension is a degraded subscription: warned once per handshake, and reported', async t => {
  const earlier = 1
  const stream = await subscribed(t, { connectTimeoutMs: 500, replayExtension: false }, { from: earlier })
  const warnings = () => stream.lines.filter(line => line.level === 'warn' && line.details.replaySupported === false)
  t.match(stream.subscriber.stats(), { state: 'connected', replaySupported: false, lastError: null })
  t.equal(warnings().length, 1)
  t.ok(stream.lines.some(line => line.level === 'info' && line.details.replaySupported === false && /without replay/.test(line.message)),
    'the subscribe log does not claim a replay from the position')
  stream.crm.dropAllSessions()
  await until(() => stream.subscriber.stats().reconnects === 1 && stream.subscriber.stats().state === 'connected', 'the next handshake')
  t.equal(warnings().length, 2, 'once more for the next handshake')
  const event = stream.crm.publishOrderProvisionRequested('801DEGRADED')
  await until(() => stream.received.includes(event), 'events still arrive')
  t.match(stream.subscriber.stats(), { state: 'connected', replaySupported: false })
})

t.test('a handshake with the replay extension: replaySupported, no warning', async t => {
  const stream = await subscribed(t, { connectTimeoutMs: 500 })
  t.match(stream.subscriber.stats(), { replaySupported: true, dropped: 0 })
  t.notOk(stream.lines.some(line => line.level === 'warn'))
})

import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { PlatformEventSubscriber, type CrmSessions, type PlatformEventSubscriberOptions, type SubscriberState } from '../../../integrations/crm/bayeux.js'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import { ORDER_PROVISION_CHANNEL, startSandbox } from '../../../dev/sandbox/index.js'
import { before } from '../../helpers/before.js'
import { json, stubServer } from '../../helpers/http-stub.js'
import { leaks, sandboxCrmClient } from '../../helpers/integrations.js'

const CONNECT_TIMEOUT_MS = 500
const MARGIN_MS = 500
const BACKOFF = { initialMs: 200, maxMs: 1000 }
// Half of what a stop() that waited would wait (a minute's margin or backoff, or forever).
const STOP_WITHIN_MS = 30_000

const sandbox = await startSandbox({ crm: { streaming: { connectTimeoutMs: CONNECT_TIMEOUT_MS } } })
const { crm } = sandbox
// Minting a token touches no usage figures, so this Redis client never connects.
const redis = new Redis({ lazyConnect: true })
const salesforce = sandboxCrmClient(sandbox.settings, redis)
t.teardown(async () => {
  await salesforce.close()
  await sandbox.close()
  redis.disconnect()
})
t.afterEach(() => {
  crm.clearFaults()
  crm.resumeAnsweringConnects()
})

const logLines: string[] = []
const log = pino({ level: 'debug' }, new Writable({
  write (chunk: Buffer, _encoding, done) {
    logLines.push(chunk.toString('utf8'))
    done()
  }
}))
const logged = (): Array<Record<string, unknown>> => logLines.map(line => JSON.parse(line) as Record<string, unknown>)

/** Every access token handed to a subscriber, to prove none is logged. */
const accessTokens = new Set<string>()
const sessions: CrmSessions = {
  session: async signal => {
    const session = await salesforce.session(signal)
    accessTokens.add(session.accessToken)
    return session
  },
  invalidateSession: refused => salesforce.invalidateSession(refused)
}

const tokenCalls = (): number => crm.calls.filter(call => call.route === 'oauth/token').length
const publish = (): number => crm.publishOrderProvisionRequested(`801ORDER${Math.random().toString(36).slice(2, 8)}`)
const replayIdsOf = (events: PlatformEventMessage[]): number[] => events.map(event => event.data.event.replayId)

async function until (condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(10)
  }
}

interface SubscriptionOptions extends Partial<PlatformEventSubscriberOptions> {
  /** Where to start; later subscribes resume after the last accepted event, as the service does. */
  from: number
  /** Runs before a batch is accepted; a rejection refuses it. */
  accept?: (events: PlatformEventMessage[]) => Promise<void>
}

/** A subscriber that records what it was offered, accepted and went through, stopped at the end of the test. */
function subscription (t: Test, { from, accept, ...options }: SubscriptionOptions) {
  const offered: number[][] = []
  const accepted: number[][] = []
  const asked: number[] = []
  const states: SubscriberState[] = []
  const subscriber = new PlatformEventSubscriber({
    crm: sessions,
    apiVersion: '60.0',
    channel: ORDER_PROVISION_CHANNEL,
    replayFrom: async () => {
      asked.push(accepted.flat().at(-1) ?? from)
      return accepted.flat().at(-1) ?? from
    },
    onPlatformEvents: async events => {
      offered.push(replayIdsOf(events))
      await accept?.(events)
      accepted.push(replayIdsOf(events))
    },
    onState: state => { states.push(state) },
    log,
    connectTimeoutMarginMs: MARGIN_MS,
    backoff: BACKOFF,
    ...options
  })
  const stopped = subscriber.start()
  t.teardown(() => subscriber.stop())
  return {
    subscriber,
    stopped,
    offered,
    accepted,
    asked,
    states,
    received: () => accepted.flat(),
    connected: () => until(() => subscriber.stats().state === 'connected', 'the subscription')
  }
}

t.test('-1 gives only new events, batched in order; the stats follow', async t => {
  const old = publish()
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  const batch = [publish(), publish(), publish()]
  await until(() => stream.received().length === 3, 'the batch')
  t.same(stream.accepted, [batch], 'one batch, in replayId order')
  t.notOk(stream.received().includes(old))
  t.match(stream.subscriber.stats(), { state: 'connected', replayId: batch[2], received: 3, reconnects: 0, lastError: null, lastEventAt: /^\d{4}-\d\d-\d\dT/ })
  t.same(stream.states, ['connecting', 'connected'])
})

t.test('-2 replays every retained event; N the ones after N', async t => {
  const first = publish()
  const rest = [publish(), publish()]
  const retained = crm.retainedEvents.map(event => event.data.event.replayId)

  const all = subscription(t, { from: -2 })
  await until(() => all.received().length >= retained.length, 'the retained events')
  t.same(all.received(), retained)

  const after = subscription(t, { from: first })
  await until(() => after.received().length >= rest.length, 'the events after N')
  await sleep(100)
  t.same(after.received(), rest)
})

t.test('the next /meta/connect waits for onPlatformEvents', async t => {
  let release = (): void => {}
  const gate = new Promise<void>(resolve => { release = resolve })
  const stream = subscription(t, { from: -1, accept: () => gate })
  await stream.connected()
  const first = publish()
  await until(() => stream.offered.length === 1, 'the first batch')
  const connects = crm.streamingStats.connects
  const second = publish()
  await sleep(CONNECT_TIMEOUT_MS * 2.5)
  t.equal(crm.streamingStats.connects, connects, 'no connect while onPlatformEvents is pending')
  release()
  await until(() => stream.received().includes(second), 'the event published meanwhile')
  t.same(stream.received(), [first, second])
})

t.test('dropped sessions: a new handshake resubscribes from replayFrom(), nothing lost or repeated', async t => {
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  const before = [publish(), publish()]
  await until(() => stream.received().length === 2, 'the first events')
  const handshakes = crm.streamingStats.handshakes
  crm.dropAllSessions()
  const meanwhile = [publish(), publish()]
  await until(() => crm.streamingStats.handshakes > handshakes && stream.subscriber.stats().state === 'connected', 'the new handshake')
  const after = publish()
  await until(() => stream.received().includes(after), 'the event after the drop')
  t.same(stream.received(), [...before, ...meanwhile, after])
  t.same(stream.asked, [-1, before[1]])
  t.match(stream.subscriber.stats(), { reconnects: 1, lastError: 'unknown_client', received: 5 })
})

t.test('watchdog: a /meta/connect that is never answered is abandoned, and the stream recovers', async t => {
  const stream = subscription(t, { from: publish() })
  await stream.connected()
  const handshakes = crm.streamingStats.handshakes
  crm.stopAnsweringConnects()
  await until(() => crm.streamingStats.handshakes > handshakes, 'a new handshake', 30_000)
  // The held connect answers within its timeout, the next one is given timeout + margin, then one
  // backoff step: it was the client's own timeout that gave it up.
  t.equal(stream.subscriber.stats().lastError, 'timeout')
  t.ok(stream.states.indexOf('failed') > stream.states.indexOf('connected'), 'the gap shows')
  crm.resumeAnsweringConnects()
  const later = publish()
  await until(() => stream.received().includes(later), 'an event after the gap', 8000)
  t.equal(stream.subscriber.stats().state, 'connected')
  t.ok(logged().some(line => line.level === 40 && /\/meta\/connect: no answer within 1000 ms/.test(String(line.msg))))
})

t.test('an expired replay position falls back, logged at error with the channel and the id', async t => {
  const expired = publish()
  publish()
  const kept = publish()
  crm.expireEventsThrough(expired + 1)
  const invalid: number[] = []
  const all = subscription(t, { from: expired, fallbackReplay: -2, onInvalidReplay: replayId => { invalid.push(replayId) } })
  await until(() => all.received().includes(kept), 'the retained events')
  t.same(all.received(), [kept])
  t.same(invalid, [expired])
  t.ok(logged().some(line => line.level === 50 && line.channel === ORDER_PROVISION_CHANNEL && line.replayId === expired &&
    String(line.msg).includes(String(expired)) && String(line.msg).includes(ORDER_PROVISION_CHANNEL)))

  const latest = subscription(t, { from: expired })
  await latest.connected()
  const fresh = publish()
  await until(() => latest.received().includes(fresh), 'a new event')
  t.same(latest.received(), [fresh], 'the fallback -1 replays nothing')
})

t.test('expired access tokens: one new token, and the stream continues', async t => {
  const stream = subscription(t, { from: publish() })
  await stream.connected()
  await sleep(50)
  const calls = tokenCalls()
  crm.expireAccessTokens()
  const later = publish()
  await until(() => stream.received().includes(later), 'an event after the new token')
  t.equal(tokenCalls(), calls + 1)
  t.match(stream.subscriber.stats(), { state: 'connected', lastError: 'auth_failed', reconnects: 1 })
})

t.test('HTTP 403 from the CometD endpoint: a new token too', async t => {
  const stream = subscription(t, { from: publish() })
  await stream.connected()
  const calls = tokenCalls()
  crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', status: 403, message: '403::Forbidden', times: 1 })
  await until(() => stream.subscriber.stats().reconnects === 1 && stream.subscriber.stats().state === 'connected', 'the new handshake')
  t.equal(tokenCalls(), calls + 1)
  t.equal(stream.subscriber.stats().lastError, 'auth_failed')
  const later = publish()
  await until(() => stream.received().includes(later), 'an event after the new token')
})

t.test('a handshake refused for its token drops that token and gets another', async t => {
  const refused: string[] = []
  const bogus = { accessToken: 'bogus', instanceUrl: crm.instanceUrl }
  let first = true
  const stream = subscription(t, {
    from: -1,
    crm: {
      session: async signal => {
        if (!first) return await sessions.session(signal)
        first = false
        return bogus
      },
      invalidateSession: session => { refused.push(session.accessToken) }
    }
  })
  await stream.connected()
  t.same(refused, ['bogus'])
  t.match(stream.subscriber.stats(), { lastError: 'auth_failed', reconnects: 1 })
})

t.test('onPlatformEvents rejecting: a new handshake, and the same events again from replayFrom()', async t => {
  let refusals = 0
  const stream = subscription(t, {
    from: publish(),
    accept: async () => {
      if (refusals++ === 0) throw new Error('queue unavailable')
    }
  })
  await stream.connected()
  const handshakes = crm.streamingStats.handshakes
  const event = publish()
  await until(() => stream.received().includes(event), 'the redelivered event')
  t.same(stream.offered, [[event], [event]])
  t.same(stream.accepted, [[event]])
  t.equal(crm.streamingStats.handshakes, handshakes + 1)
  t.match(stream.subscriber.stats(), { received: 1, replayId: event, lastError: 'events_rejected' })
})

t.test('reconnect none and HTTP 5xx are failures: back off, then handshake again', async t => {
  crm.injectFault({ kind: 'http5xx', route: 'cometd/meta/handshake', status: 503, times: 1 })
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  t.same(stream.states, ['connecting', 'failed', 'connecting', 'connected'])
  t.equal(stream.subscriber.stats().lastError, 'http_5xx')
  crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '503::Server is too busy', reconnect: 'none', times: 1 })
  await until(() => stream.states.length === 7, 'the second recovery')
  t.same(stream.states.slice(4), ['failed', 'connecting', 'connected'])
  t.match(stream.subscriber.stats(), { lastError: 'reconnect_none', reconnects: 2 })
  t.ok(logged().some(line => line.failure === 'reconnect_none' && line.retryInMs === BACKOFF.maxMs), 'after reconnect none it waits the longest backoff')
})

t.test('a connect answered unsuccessful with retry advice is sent again by the same client: no new handshake', async t => {
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  const handshakes = crm.calls.filter(call => call.route === 'cometd/meta/handshake').length
  crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '500::Temporarily unavailable', reconnect: 'retry', times: 2 })
  await until(() => logged().filter(line => String(line.msg).includes('connecting again')).length === 2, 'two connects again')
  const event = publish()
  await until(() => stream.received().includes(event), 'an event after the retries')
  t.equal(crm.calls.filter(call => call.route === 'cometd/meta/handshake').length, handshakes, 'the client id was kept')
  t.match(stream.subscriber.stats(), { state: 'connected', reconnects: 0 })
})

t.test('advice to handshake with an interval: the next handshake waits that interval', async t => {
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  const handshakes = crm.calls.filter(call => call.route === 'cometd/meta/handshake').length
  crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '500::Server restarting', reconnect: 'handshake', interval: 600, times: 1 })
  await until(() => crm.calls.filter(call => call.route === 'cometd/meta/handshake').length > handshakes, 'a new handshake')
  const calls = crm.calls
  const handshakeAt = calls.findLastIndex(call => call.route === 'cometd/meta/handshake')
  const handshake = calls[handshakeAt]!
  const refused = calls.slice(0, handshakeAt).findLast(call => call.route === 'cometd/meta/connect')!
  t.ok(Date.parse(handshake.at) - Date.parse(refused.at) >= 600, `handshook ${Date.parse(handshake.at) - Date.parse(refused.at)} ms after the advice`)
  t.equal(stream.subscriber.stats().lastError, 'handshake_advised')
  await stream.connected()
})

t.test('a connect whose answer is lost (HTTP 5xx) is sent again by the same client, three times at most', async t => {
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  const handshakes = crm.calls.filter(call => call.route === 'cometd/meta/handshake').length
  const retries = logged().filter(line => /HTTP 502; connecting again/.test(String(line.msg))).length
  crm.injectFault({ kind: 'http5xx', route: 'cometd/meta/connect', status: 502, times: 2 })
  await until(() => logged().filter(line => /HTTP 502; connecting again/.test(String(line.msg))).length === retries + 2, 'two connects again')
  const event = publish()
  await until(() => stream.received().includes(event), 'an event after the retries')
  t.equal(crm.calls.filter(call => call.route === 'cometd/meta/handshake').length, handshakes, 'the client id was kept')
  t.match(stream.subscriber.stats(), { state: 'connected', reconnects: 0 })

  crm.injectFault({ kind: 'http5xx', route: 'cometd/meta/connect', status: 502, times: 4 })
  await until(() => stream.subscriber.stats().reconnects === 1, 'a new handshake after the fourth')
  t.equal(stream.subscriber.stats().lastError, 'http_5xx')
  await stream.connected()
})

t.test('errors in the Bayeux form code:args:message: Unknown client with args, an invalid replay id in other words', async t => {
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '402:f8k2:Unknown client', times: 1 })
  await until(() => stream.subscriber.stats().reconnects === 1, 'a new handshake')
  await stream.connected()
  t.equal(stream.subscriber.stats().lastError, 'unknown_client')

  const from = publish()
  const invalid: number[] = []
  crm.injectFault({ kind: 'error', route: 'cometd/meta/subscribe', message: `400:${ORDER_PROVISION_CHANNEL}:replay id is invalid`, times: 1 })
  const fallback = subscription(t, { from, fallbackReplay: -1, onInvalidReplay: replayId => { invalid.push(replayId) } })
  await fallback.connected()
  t.same(invalid, [from], 'the refused id is the one it sent')
})

t.test('an invalid replay id refused with HTTP 400 rather than in a 200 answer: the same fallback', async t => {
  const from = publish()
  const invalid: number[] = []
  crm.injectFault({ kind: 'error', route: 'cometd/meta/subscribe', status: 400, message: `400::The replayId {${from}} you provided was invalid.  Please provide a valid ID, -2 to replay all events, or -1 to replay only new events.`, times: 1 })
  const fallback = subscription(t, { from, fallbackReplay: -1, onInvalidReplay: replayId => { invalid.push(replayId) } })
  await fallback.connected()
  t.same(invalid, [from], 'the fallback, not a retry of the same id')
})

t.test('a refusal that names no channel, as Salesforce has answered one, is the reply: a 401 gets a new token', async t => {
  const instanceUrl = await stubServer(t, () => json(200, '[{"error":"401::Request requires authentication","successful":false}]'))
  const refused: string[] = []
  const stream = subscription(t, {
    from: -1,
    crm: {
      session: async () => ({ accessToken: `token-${refused.length}`, instanceUrl }),
      invalidateSession: session => { refused.push(session.accessToken) }
    }
  })
  await until(() => refused.length > 0, 'the token dropped')
  t.equal(refused[0], 'token-0')
  t.equal(stream.subscriber.stats().lastError, 'auth_failed')
})

t.test('an event without EventUuid, as API versions before 52.0 deliver it, is delivered with its payload', async t => {
  const events: PlatformEventMessage[] = []
  const stream = subscription(t, { from: -1, accept: async batch => { events.push(...batch) } })
  await stream.connected()
  const replayId = crm.publishOrderProvisionRequestedWithoutUuid('801NOUUID')
  await until(() => stream.received().includes(replayId), 'the event')
  t.match(events, [{ data: { payload: { OrderId__c: '801NOUUID' }, event: { replayId } } }])
  t.notOk('EventUuid' in events[0]!.data.event)
})

t.test('a malformed event is logged with its replayId and skipped; the stream goes on', async t => {
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  const malformed = crm.publishMalformedEvent()
  const event = publish()
  await until(() => stream.received().includes(event), 'the next event')
  t.same(stream.received(), [event])
  t.ok(logged().some(line => line.level === 50 && line.replayId === malformed && String(line.msg).includes('skipped')))
  t.match(stream.subscriber.stats(), { reconnects: 0, dropped: 1, lastError: 'event_without_payload' }, 'no new handshake for it; counted')
})

t.test('a quota refusal ("limit exceeded") is quota_exceeded: back off, then handshake again and receive', async t => {
  crm.injectFault({ kind: 'error', route: 'cometd/meta/handshake', message: '403::Organization concurrent user limit exceeded', times: 1 })
  const stream = subscription(t, { from: -1 })
  await stream.connected()
  t.same(stream.states, ['connecting', 'failed', 'connecting', 'connected'])
  t.equal(stream.subscriber.stats().lastError, 'quota_exceeded')
  const event = publish()
  await until(() => stream.received().includes(event), 'an event after the recovery')
})

t.test('stop() ends at once, mid long poll, and says /meta/disconnect', async t => {
  const stream = subscription(t, { from: -1, connectTimeoutMarginMs: 60_000 })
  await stream.connected()
  crm.stopAnsweringConnects()
  await sleep(CONNECT_TIMEOUT_MS + 200)
  const disconnects = crm.streamingStats.disconnects
  t.ok(await before(STOP_WITHIN_MS, stream.subscriber.stop().then(() => stream.stopped).then(() => true)), 'stopped without waiting out the long poll (its margin is a minute)')
  t.equal(crm.streamingStats.disconnects, disconnects + 1)
  t.equal(stream.subscriber.stats().state, 'stopped')
  t.equal(stream.states.at(-1), 'stopped')
})

t.test('stop() ends at once during a hung handshake and during a backoff', async t => {
  crm.injectFault({ kind: 'blackhole', route: 'cometd/meta/handshake', times: 1 })
  const hung = subscription(t, { from: -1 })
  await until(() => crm.calls.at(-1)?.route === 'cometd/meta/handshake', 'the handshake')
  t.ok(await before(STOP_WITHIN_MS, hung.subscriber.stop().then(() => true)), 'stopped without waiting on the handshake, which never answers')

  const waiting = subscription(t, {
    from: -1,
    backoff: { initialMs: 60_000 },
    crm: { session: async () => { throw new Error('no session') }, invalidateSession: () => {} }
  })
  await until(() => waiting.subscriber.stats().state === 'failed', 'the backoff')
  t.ok(await before(STOP_WITHIN_MS, waiting.subscriber.stop().then(() => true)), 'stopped without waiting out the backoff (a minute)')
  t.throws(() => waiting.subscriber.start(), /started already/)
})

t.test('no log line carries an access token', async t => {
  t.ok(accessTokens.size >= 2)
  t.same(leaks(logLines, [...accessTokens]), [])
})

import { sign } from 'node:crypto'
import t from 'tap'
import { CrmSimulator, ORDER_PROVISION_CHANNEL } from '../../../dev/sandbox/crm.js'
import { before } from '../../helpers/before.js'

// Bayeux messages are probed field by field; t.match and t.same check their shapes.
type Json = any

const CONNECT_TIMEOUT_MS = 300
const crm = await new CrmSimulator({ streaming: { connectTimeoutMs: CONNECT_TIMEOUT_MS } }).start()
t.teardown(() => crm.close())

async function accessToken (simulator = crm): Promise<string> {
  const encode = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  const claims = { iss: simulator.clientId, sub: simulator.username, aud: simulator.loginUrl, exp: Math.floor(Date.now() / 1000) + 180 }
  const unsigned = `${encode({ alg: 'RS256' })}.${encode(claims)}`
  const jwt = `${unsigned}.${sign('RSA-SHA256', Buffer.from(unsigned), simulator.privateKey).toString('base64url')}`
  const response = await fetch(`${simulator.loginUrl}/services/oauth2/token`, {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion: jwt })
  })
  return ((await response.json()) as { access_token: string }).access_token
}

/** A minimal long-polling Bayeux client that keeps its cookies, as the service must. */
class BayeuxClient {
  token: string | undefined
  cookie: string | undefined
  clientId: string | undefined
  #nextId = 1

  constructor (token: string | undefined, readonly simulator = crm) {
    this.token = token
  }

  async send (messages: Json[], signal?: AbortSignal): Promise<Json[]> {
    const response = await fetch(`${this.simulator.instanceUrl}/cometd/60.0`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(this.token === undefined ? {} : { authorization: `Bearer ${this.token}` }),
        ...(this.cookie === undefined ? {} : { cookie: this.cookie })
      },
      body: JSON.stringify(messages.map(message => ({ id: String(this.#nextId++), clientId: this.clientId, ...message }))),
      ...(signal === undefined ? {} : { signal })
    })
    for (const setCookie of response.headers.getSetCookie()) this.cookie = setCookie.split(';')[0]
    return await response.json() as Json[]
  }

  async handshake (): Promise<Json> {
    const [reply] = await this.send([{ channel: '/meta/handshake', version: '1.0', supportedConnectionTypes: ['long-polling'] }])
    if (reply.successful === true) this.clientId = reply.clientId
    return reply
  }

  async subscribe (replayId?: number, subscription = ORDER_PROVISION_CHANNEL): Promise<Json> {
    const ext = replayId === undefined ? {} : { ext: { replay: { [subscription]: replayId } } }
    const [reply] = await this.send([{ channel: '/meta/subscribe', subscription, ...ext }])
    return reply
  }

  async connect (signal?: AbortSignal): Promise<Json[]> {
    return await this.send([{ channel: '/meta/connect', connectionType: 'long-polling' }], signal)
  }

  /** Handshake, the first (immediate) connect, then a subscription. */
  async start (replayId?: number): Promise<Json> {
    await this.handshake()
    await this.connect()
    return await this.subscribe(replayId)
  }
}

const replayIds = (messages: Json[]): number[] => messages.filter(message => message.channel === ORDER_PROVISION_CHANNEL).map(message => message.data.event.replayId)

t.test('handshake: client id, advice, replay extension and the BAYEUX_BROWSER cookie', async t => {
  const client = new BayeuxClient(await accessToken())
  const reply = await client.handshake()
  t.match(reply, {
    channel: '/meta/handshake',
    id: '1',
    successful: true,
    version: '1.0',
    clientId: /^[a-z0-9]{20,}$/,
    supportedConnectionTypes: ['long-polling'],
    advice: { interval: 0, timeout: CONNECT_TIMEOUT_MS, reconnect: 'retry' },
    ext: { replay: true, 'payload.format': true }
  })
  t.match(client.cookie, /^BAYEUX_BROWSER=.+/)
})

t.test('handshake with a bad or missing token is denied', async t => {
  for (const [token, reason] of [['bogus', '401::Authentication invalid'], [undefined, '401::Request requires authentication']] as const) {
    const reply = await new BayeuxClient(token).handshake()
    t.match(reply, { channel: '/meta/handshake', successful: false, error: '403::Handshake denied', ext: { sfdc: { failureReason: reason } }, advice: { reconnect: 'none' } })
  }
})

t.test('a connect carries batched events with increasing replay ids, before its own reply', async t => {
  const client = new BayeuxClient(await accessToken())
  t.match(await client.start(-1), { channel: '/meta/subscribe', successful: true, subscription: ORDER_PROVISION_CHANNEL })
  const pending = client.connect()
  await new Promise(resolve => setTimeout(resolve, 50))
  const first = crm.publishOrderProvisionRequested('801AAA')
  const second = crm.publishOrderProvisionRequested('801BBB')
  t.ok(second > first)
  const messages = await pending
  t.same(replayIds(messages), [first, second])
  t.match(messages[0], {
    channel: ORDER_PROVISION_CHANNEL,
    data: { schema: String, payload: { OrderId__c: '801AAA', CreatedDate: String, CreatedById: /^005/ }, event: { replayId: first, EventUuid: String } }
  })
  t.match(messages.at(-1), { channel: '/meta/connect', successful: true, clientId: client.clientId })
})

t.test('an idle connect is held for advice.timeout, then answered empty', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.start(-1)
  const started = Date.now()
  const messages = await client.connect()
  t.ok(Date.now() - started >= CONNECT_TIMEOUT_MS - 20, 'held')
  t.match(messages, [{ channel: '/meta/connect', successful: true }])
})

t.test('replay: -2 gives every retained event, N the ones after N, -1 only new ones', async t => {
  const published = [crm.publishOrderProvisionRequested('801R1'), crm.publishOrderProvisionRequested('801R2'), crm.publishOrderProvisionRequested('801R3')]
  const retained = crm.retainedEvents.map(event => event.data.event.replayId)

  const all = new BayeuxClient(await accessToken())
  await all.start(-2)
  t.same(replayIds(await all.connect()), retained)

  const after = new BayeuxClient(await accessToken())
  await after.start(published[0])
  t.same(replayIds(await after.connect()), published.slice(1))

  const fresh = new BayeuxClient(await accessToken())
  await fresh.start(-1)
  t.same(replayIds(await fresh.connect()), [])
})

t.test('a replay id no longer retained is invalid', async t => {
  const old = crm.publishOrderProvisionRequested('801OLD')
  crm.publishOrderProvisionRequested('801NEW')
  crm.expireEventsThrough(old)
  const client = new BayeuxClient(await accessToken())
  await client.handshake()
  await client.connect()
  for (const replayId of [old, 999_999]) {
    t.match(await client.subscribe(replayId), {
      channel: '/meta/subscribe',
      successful: false,
      subscription: ORDER_PROVISION_CHANNEL,
      error: `400::The replayId {${replayId}} you provided was invalid. Please provide a valid ID, -2 to replay all events, or -1 to replay only new events.`
    })
  }
})

t.test('a channel the org does not have', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.handshake()
  t.match(await client.subscribe(-1, '/event/Nope__e'), {
    successful: false,
    error: '400::The channel you requested to subscribe to does not exist {/event/Nope__e}'
  })
})

t.test('a client that does not keep cookies is refused', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.handshake()
  client.cookie = undefined
  const [reply] = await client.connect()
  t.match(reply, { channel: '/meta/connect', successful: false, error: `400::Client ${String(client.clientId)} has established a session, but no BAYEUX_BROWSER cookie present` })
  client.cookie = 'BAYEUX_BROWSER=someone-else'
  t.match((await client.connect())[0], { successful: false, error: '403::Unknown client' })
})

t.test('dropAllSessions: held and later connects get 403::Unknown client with reconnect handshake', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.start(-1)
  const held = client.connect()
  await new Promise(resolve => setTimeout(resolve, 50))
  crm.dropAllSessions()
  const unknownClient = { channel: '/meta/connect', successful: false, error: '403::Unknown client', advice: { reconnect: 'handshake', interval: 0 } }
  t.match(await held, [unknownClient])
  t.match(await client.connect(), [unknownClient])
  t.match(await client.start(-1), { successful: true }, 'a new handshake recovers')
})

t.test('expired access tokens: held connects get 401::Authentication invalid', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.start(-1)
  const held = client.connect()
  await new Promise(resolve => setTimeout(resolve, 50))
  crm.expireAccessTokens()
  t.match(await held, [{ channel: '/meta/connect', successful: false, error: '401::Authentication invalid', advice: { reconnect: 'none' } }])
  client.token = await accessToken()
  t.match(await client.start(-1), { successful: true })
})

t.test('stopAnsweringConnects: connects hang until resumed', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.start(-1)
  const before = crm.streamingStats.connects
  crm.stopAnsweringConnects()
  await t.rejects(client.connect(AbortSignal.timeout(CONNECT_TIMEOUT_MS * 3)), { name: 'TimeoutError' })
  t.equal(crm.streamingStats.connects, before + 1, 'the connect was received')
  crm.resumeAnsweringConnects()
  crm.publishOrderProvisionRequested('801LATE')
  t.equal(replayIds(await client.connect()).length, 1)
})

t.test('an injected Bayeux error on /meta/connect', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.start(-1)
  crm.injectFault({ kind: 'error', route: 'cometd/meta/connect', message: '503::Server is too busy', reconnect: 'retry', times: 1 })
  t.match(await client.connect(), [{ channel: '/meta/connect', clientId: client.clientId, successful: false, error: '503::Server is too busy', advice: { reconnect: 'retry' } }])
  t.same(crm.faults, [])
})

t.test('unsubscribe and disconnect', async t => {
  const client = new BayeuxClient(await accessToken())
  await client.start(-1)
  const [unsubscribed] = await client.send([{ channel: '/meta/unsubscribe', subscription: ORDER_PROVISION_CHANNEL }])
  t.match(unsubscribed, { channel: '/meta/unsubscribe', successful: true })
  const [disconnected] = await client.send([{ channel: '/meta/disconnect' }])
  t.match(disconnected, { channel: '/meta/disconnect', successful: true })
  t.match(await client.connect(), [{ error: '403::Unknown client' }])
})

t.test('close() ends a held connect at once', async t => {
  const other = await new CrmSimulator({ streaming: { connectTimeoutMs: 60_000 } }).start()
  const client = new BayeuxClient(await accessToken(other), other)
  await client.start(-1)
  const held = client.connect()
  await new Promise(resolve => setTimeout(resolve, 50))
  // The connect is held for a minute: a close before half of it did not wait for it.
  t.ok(await before(30_000, other.close().then(() => true)), 'closed without waiting out the held connect')
  await t.rejects(held)
})

import { randomBytes, randomInt, randomUUID } from 'node:crypto'
import { jsonReply, textReply, untilAborted } from './simulator.js'
import type { Fault, IncomingCall, Reply } from './simulator.js'

export const ORDER_PROVISION_CHANNEL = '/event/OrderProvisionRequested__e'
const EVENT_SCHEMA_ID = 'k5cT2d7uQJmH3x0f6PlE9A'
const BROWSER_COOKIE = 'BAYEUX_BROWSER'
const REPLAY_NEW = -1
const REPLAY_ALL = -2

export type OrderProvisionRequested = {
  OrderId__c: string
  CreatedDate: string
  CreatedById: string
}

// A type rather than an interface, so that it fits where any Bayeux message does.
export type PlatformEventMessage = {
  channel: string
  data: {
    schema: string
    /** Absent only in the malformed events a test publishes. */
    payload?: OrderProvisionRequested
    /** EventUuid is absent in the events a test publishes as API versions before 52.0 deliver them, replayId in malformed ones. */
    event: { replayId: number, EventUuid?: string }
  }
}

export interface StreamingOptions {
  /** advice.timeout: how long a /meta/connect is held when there is nothing to deliver (Salesforce: 110 s). */
  connectTimeoutMs?: number
  /** A client that has not polled for this long is forgotten, as CometD does: its next message gets 403::Unknown client. */
  clientTimeoutMs?: number
  /** How many events are kept for replay; the oldest go first. */
  retainedEvents?: number
  /** Holds a client's first connect like the others (and whatever its advice asks), where CometD answers it at once. */
  holdFirstConnect?: boolean
  /** false: a Bayeux server without the replay extension: the handshake grants none, a subscribe gets new events only. */
  replayExtension?: boolean
  /** What the events `publishMalformed` publishes lack: their payload (the default) or their replayId. */
  malformedEventsLack?: 'payload' | 'replayId'
  /**
   * The replayId of the first event: an org that goes on numbering where a subscriber's stored
   * position left off (the development entry's new sandbox), so that position is still valid.
   */
  firstReplayId?: number
}

export type StreamingStats = Record<'handshakes' | 'subscribes' | 'unsubscribes' | 'connects' | 'disconnects', number>

type Message = Record<string, unknown>
/** Why a held /meta/connect is woken up. */
type Wake = 'deliver' | 'empty' | 'unknown-client' | 'authentication-invalid'

interface StreamingClient {
  id: string
  browserId: string
  subscribed: boolean
  connected: boolean
  queue: PlatformEventMessage[]
  lastSeen: number
  wake?: (reason: Wake) => void
}

interface Exchange {
  token: string | undefined
  browserId: string | undefined
  setCookies: string[]
  signal: AbortSignal
}

function isMessage (value: unknown): value is Message {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** The messages of a Bayeux request body (an array, or a single message), or undefined when it is not one. */
export function bayeuxMessages (body: Buffer): Message[] | undefined {
  let parsed: unknown
  try {
    parsed = JSON.parse(body.toString('utf8'))
  } catch {
    return undefined
  }
  const messages = Array.isArray(parsed) ? parsed : [parsed]
  return messages.every(isMessage) ? messages : undefined
}

function cookieValue (header: string | undefined, name: string): string | undefined {
  for (const pair of (header ?? '').split(';')) {
    const [key, ...value] = pair.trim().split('=')
    if (key === name) return value.join('=')
  }
  return undefined
}

function newClientId (): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789'
  return Array.from({ length: 27 }, () => alphabet[randomInt(alphabet.length)]).join('')
}

/** The reply skeleton: the request's channel, and its id when it had one. */
function replyTo (message: Message, fields: Message): Message {
  return { channel: message.channel, ...(message.id === undefined ? {} : { id: message.id }), ...fields }
}

function failure (message: Message, error: string, fields: Message = {}): Message {
  const clientId = typeof message.clientId === 'string' ? { clientId: message.clientId } : {}
  return replyTo(message, { ...clientId, ...fields, successful: false, error })
}

function unknownClient (message: Message): Message {
  return failure(message, '403::Unknown client', { advice: { reconnect: 'handshake', interval: 0 } })
}

function authenticationFailure (message: Message, error: string): Message {
  return failure(message, error, { advice: { reconnect: 'none', interval: 0 } })
}

/** The replay position a subscribe asks for: `ext.replay[channel]`, -1 (new events only) when absent. */
function requestedReplayId (message: Message, channel: string): unknown {
  const ext = message.ext
  if (!isMessage(ext) || !isMessage(ext.replay)) return REPLAY_NEW
  return ext.replay[channel] ?? REPLAY_NEW
}

/**
 * Salesforce Streaming API for platform events: CometD / Bayeux 1.0 over long polling,
 * with the replay extension and the BAYEUX_BROWSER cookie that ties a client to its server.
 */
export class StreamingApi {
  #muted = false
  readonly stats: StreamingStats = { handshakes: 0, subscribes: 0, unsubscribes: 0, connects: 0, disconnects: 0 }
  readonly #options: Required<StreamingOptions>
  #isValidToken: (token: string) => boolean
  #clients = new Map<string, StreamingClient>()
  #events: PlatformEventMessage[] = []
  #nextReplayId: number
  /** The position before the first event: valid while that event is retained, or none was published. */
  readonly #start: number
  #answeringConnects = true

  constructor (isValidToken: (token: string) => boolean, options: StreamingOptions = {}) {
    this.#isValidToken = isValidToken
    const { connectTimeoutMs = 110_000, clientTimeoutMs = 40_000, retainedEvents = 1000, holdFirstConnect = false } = options
    const { replayExtension = true, malformedEventsLack = 'payload', firstReplayId = 1 } = options
    this.#options = { connectTimeoutMs, clientTimeoutMs, retainedEvents, holdFirstConnect, replayExtension, malformedEventsLack, firstReplayId }
    this.#nextReplayId = firstReplayId
    this.#start = firstReplayId - 1
  }

  get clientCount (): number { return this.#clients.size }

  /** The events still available for replay, oldest first. */
  get retained (): readonly PlatformEventMessage[] { return [...this.#events] }

  async handle (call: IncomingCall, token: string | undefined): Promise<Reply | undefined> {
    const messages = bayeuxMessages(call.body)
    if (messages === undefined) return textReply(400, 'Bad Request')
    const exchange: Exchange = { token, browserId: cookieValue(call.headers.cookie, BROWSER_COOKIE), setCookies: [], signal: call.signal }
    const replies: Message[] = []
    for (const message of messages) {
      const answer = await this.#process(message, exchange)
      if (answer === undefined) return undefined
      replies.push(...answer)
    }
    return jsonReply(200, replies, exchange.setCookies.length > 0 ? { 'set-cookie': exchange.setCookies } : {})
  }

  /** The answer of an injected `error` fault: every message of the request fails with the fault's Bayeux error. */
  errorReply (call: IncomingCall, fault: Fault): Reply {
    const advice = fault.reconnect === undefined ? {} : { advice: { reconnect: fault.reconnect, interval: fault.interval ?? 0 } }
    const replies = (bayeuxMessages(call.body) ?? []).map(message => failure(message, fault.message ?? '500::Internal Server Error', advice))
    return jsonReply(fault.status ?? 200, replies)
  }

  publish (payload: OrderProvisionRequested): number { return this.#publish(payload, true) }
  /** An event as API versions before 52.0 deliver it: without EventUuid. */
  publishWithoutUuid (payload: OrderProvisionRequested): number { return this.#publish(payload, false) }

  /** An event without its payload (or replayId: `malformedEventsLack`), as a faulty publisher leaves it: a client must get past it. */
  publishMalformed (): number {
    return this.#publish(undefined, true, this.#options.malformedEventsLack === 'replayId')
  }

  #publish (payload: OrderProvisionRequested | undefined, withUuid: boolean, withoutReplayId = false): number {
    const replayId = this.#nextReplayId++
    const event = { ...(withoutReplayId ? {} : { replayId }), ...(withUuid ? { EventUuid: randomUUID() } : {}) } as PlatformEventMessage['data']['event']
    this.#offer({ channel: ORDER_PROVISION_CHANNEL, data: { schema: EVENT_SCHEMA_ID, ...(payload === undefined ? {} : { payload }), event } })
    return replayId
  }

  /**
   * While muted, events are kept (a subscription replaying from before them gets them) but not
   * pushed to the connected clients: a stream that looks connected and receives nothing.
   */
  muteDelivery (muted: boolean): void {
    this.#muted = muted
  }

  #offer (event: PlatformEventMessage): void {
    this.#events.push(event)
    this.#events.splice(0, Math.max(0, this.#events.length - this.#options.retainedEvents))
    if (this.#muted) return
    for (const client of this.#clients.values()) {
      if (!client.subscribed) continue
      client.queue.push(event)
      // The held connect answers in a later microtask, so events published together go out together.
      client.wake?.('deliver')
    }
  }

  /** Drops retained events up to and including `replayId`: a subscriber asking for them gets the invalid replayId error. */
  expireEventsThrough (replayId: number): void {
    this.#events = this.#events.filter(event => event.data.event.replayId > replayId)
  }

  /** Forgets every client, as a CometD server does after a restart or a timeout. */
  dropAllSessions (): void {
    for (const client of this.#clients.values()) client.wake?.('unknown-client')
    this.#clients.clear()
  }

  /** Tells held connects that their session is gone (an expired or revoked access token). */
  rejectHeldConnects (): void {
    for (const client of this.#clients.values()) client.wake?.('authentication-invalid')
  }

  stopAnsweringConnects (): void { this.#answeringConnects = false }
  resumeAnsweringConnects (): void { this.#answeringConnects = true }

  async #process (message: Message, exchange: Exchange): Promise<Message[] | undefined> {
    switch (message.channel) {
      case '/meta/handshake':
        return [this.#handshake(message, exchange)]
      case '/meta/connect':
        return await this.#connect(message, exchange)
      case '/meta/subscribe':
        return [this.#subscribe(message, exchange)]
      case '/meta/unsubscribe':
        return [this.#unsubscribe(message, exchange)]
      case '/meta/disconnect':
        return [this.#disconnect(message, exchange)]
    }
    if (typeof message.channel !== 'string' || message.channel === '') return [failure(message, '400::Channel name not specified')]
    if (message.channel.startsWith('/meta/')) return [failure(message, `400::Unknown meta channel {${message.channel}}`)]
    return [failure(message, '403::Publish denied')]
  }

  #authenticationError (token: string | undefined): string | undefined {
    if (token === undefined) return '401::Request requires authentication'
    return this.#isValidToken(token) ? undefined : '401::Authentication invalid'
  }

  #advice (): Message {
    return { interval: 0, timeout: this.#options.connectTimeoutMs, reconnect: 'retry' }
  }

  #handshake (message: Message, exchange: Exchange): Message {
    this.stats.handshakes++
    const authenticationError = this.#authenticationError(exchange.token)
    if (authenticationError !== undefined) {
      return failure(message, '403::Handshake denied', { ext: { sfdc: { failureReason: authenticationError } }, advice: { reconnect: 'none' } })
    }
    const types = message.supportedConnectionTypes
    if (Array.isArray(types) && !types.includes('long-polling')) {
      return failure(message, `400::Invalid connection type {${types.join(',')}}`)
    }
    if (exchange.browserId === undefined) {
      exchange.browserId = randomBytes(18).toString('base64url')
      exchange.setCookies.push(`${BROWSER_COOKIE}=${exchange.browserId}; Path=/; HttpOnly`)
    }
    const client: StreamingClient = {
      id: newClientId(),
      browserId: exchange.browserId,
      subscribed: false,
      connected: false,
      queue: [],
      lastSeen: Date.now()
    }
    this.#clients.set(client.id, client)
    return replyTo(message, {
      clientId: client.id,
      version: '1.0',
      minimumVersion: '1.0',
      supportedConnectionTypes: ['long-polling'],
      advice: this.#advice(),
      ext: this.#options.replayExtension ? { replay: true, 'payload.format': true } : { 'payload.format': true },
      successful: true
    })
  }

  /** The client a message speaks for, or the failure to answer it with. */
  #session (message: Message, exchange: Exchange): { client: StreamingClient } | { failure: Message } {
    const authenticationError = this.#authenticationError(exchange.token)
    if (authenticationError !== undefined) return { failure: authenticationFailure(message, authenticationError) }
    const client = typeof message.clientId === 'string' ? this.#clients.get(message.clientId) : undefined
    if (client === undefined) return { failure: unknownClient(message) }
    if (client.wake === undefined && Date.now() - client.lastSeen > this.#options.clientTimeoutMs) {
      this.#clients.delete(client.id)
      return { failure: unknownClient(message) }
    }
    if (exchange.browserId === undefined) {
      return { failure: failure(message, `400::Client ${client.id} has established a session, but no ${BROWSER_COOKIE} cookie present`) }
    }
    // Another browser id means the request reached a server that never saw this client.
    if (exchange.browserId !== client.browserId) return { failure: unknownClient(message) }
    client.lastSeen = Date.now()
    return { client }
  }

  async #connect (message: Message, exchange: Exchange): Promise<Message[] | undefined> {
    this.stats.connects++
    const session = this.#session(message, exchange)
    if ('failure' in session) return [session.failure]
    const { client } = session
    if (message.connectionType !== undefined && message.connectionType !== 'long-polling') {
      return [failure(message, `400::Invalid connection type {${String(message.connectionType)}}`)]
    }
    if (!this.#answeringConnects) {
      await untilAborted(exchange.signal)
      return undefined
    }
    const connected = (fields: Message = {}): Message => replyTo(message, { clientId: client.id, ...fields, successful: true })
    // CometD answers a client's first connect at once, to hand it the advice.
    if (!client.connected && !this.#options.holdFirstConnect) {
      client.connected = true
      return [...client.queue.splice(0), connected({ advice: this.#advice() })]
    }
    if (client.queue.length === 0) {
      client.wake?.('empty')
      const reason = await this.#hold(client, exchange.signal)
      if (exchange.signal.aborted) return undefined
      if (reason === 'unknown-client') return [unknownClient(message)]
      if (reason === 'authentication-invalid') return [authenticationFailure(message, '401::Authentication invalid')]
      if (reason === 'empty') return [connected()]
    }
    return [...client.queue.splice(0), connected()]
  }

  #hold (client: StreamingClient, signal: AbortSignal): Promise<Wake> {
    if (signal.aborted) return Promise.resolve('empty')
    return new Promise(resolve => {
      const wake = (reason: Wake): void => {
        clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        if (client.wake === wake) client.wake = undefined
        client.lastSeen = Date.now()
        resolve(reason)
      }
      const onAbort = (): void => wake('empty')
      const timer = setTimeout(() => wake('deliver'), this.#options.connectTimeoutMs)
      signal.addEventListener('abort', onAbort, { once: true })
      client.wake = wake
    })
  }

  #subscribe (message: Message, exchange: Exchange): Message {
    this.stats.subscribes++
    const session = this.#session(message, exchange)
    if ('failure' in session) return session.failure
    const { client } = session
    const subscription = message.subscription
    const answer = (fields: Message): Message => replyTo(message, { clientId: client.id, subscription, ...fields })
    if (typeof subscription !== 'string' || subscription === '') return answer({ successful: false, error: '400::Channel name not specified' })
    if (!subscription.startsWith('/')) return answer({ successful: false, error: "400::Channel subscriptions must start with a leading '/'" })
    if (subscription !== ORDER_PROVISION_CHANNEL) {
      return answer({ successful: false, error: `400::The channel you requested to subscribe to does not exist {${subscription}}` })
    }
    // A server without the replay extension ignores the position asked for: new events only.
    const replayId = this.#options.replayExtension ? requestedReplayId(message, subscription) : REPLAY_NEW
    if (replayId === REPLAY_NEW) {
      client.queue = []
    } else if (replayId === REPLAY_ALL) {
      client.queue = [...this.#events]
    } else if (this.#events.some(event => event.data.event.replayId === replayId) || (replayId === this.#start && this.#fromStartRetained())) {
      client.queue = this.#events.filter(event => event.data.event.replayId > (replayId as number))
    } else {
      return answer({
        successful: false,
        error: `400::The replayId {${String(replayId)}} you provided was invalid. Please provide a valid ID, -2 to replay all events, or -1 to replay only new events.`
      })
    }
    client.subscribed = true
    if (client.queue.length > 0) client.wake?.('deliver')
    return answer({ successful: true })
  }

  #fromStartRetained (): boolean {
    const oldest = this.#events[0]?.data.event.replayId
    return oldest === undefined ? this.#nextReplayId === this.#options.firstReplayId : oldest === this.#options.firstReplayId
  }

  #unsubscribe (message: Message, exchange: Exchange): Message {
    this.stats.unsubscribes++
    const session = this.#session(message, exchange)
    if ('failure' in session) return session.failure
    const { client } = session
    client.subscribed = false
    client.queue = []
    return replyTo(message, { clientId: client.id, subscription: message.subscription, successful: true })
  }

  #disconnect (message: Message, exchange: Exchange): Message {
    this.stats.disconnects++
    const session = this.#session(message, exchange)
    if ('failure' in session) return session.failure
    const { client } = session
    client.wake?.('empty')
    this.#clients.delete(client.id)
    return replyTo(message, { clientId: client.id, successful: true })
  }
}

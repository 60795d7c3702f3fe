// Written by hand rather than on Faye or jsforce: Faye does not surface `reconnect: none` advice, and
// jsforce's replay extension mishandles channels; the service needs full control of advice, replay and
// the watchdog.
import { setTimeout as sleep } from 'node:timers/promises'
import { abortable } from '../../lib/abortable.js'
import { Backoff } from './backoff.js'
import { BayeuxTransport, StreamInterruption, type BayeuxMessage, type StreamFailure } from './bayeux-transport.js'
import {
  HANDSHAKE_AT_ONCE, LOST_ANSWERS, connectMessage, disconnectMessage, eventsIn, grantsReplay, handshakeMessage, interruptionOf,
  isInvalidReplay, isReconnectRefused, refusal, replyTo, subscribeMessage, type PlatformEventMessage
} from './bayeux-protocol.js'
import type { CrmSession } from './client.js'
import { asRecord, type UpstreamLogger } from '../upstream.js'

/** What the subscriber needs of the CRM client (a CrmClient fits). */
export interface CrmSessions {
  session: (signal: AbortSignal) => Promise<CrmSession>
  /** Drops a session the Streaming API refused, so that the next `session()` mints a new one. */
  invalidateSession: (refused: CrmSession) => void
}

/**
 * `connecting`: getting a session, handshaking and subscribing; `connected`: subscribed, long polling;
 * `failed`: after a failure, backing off before the next handshake.
 */
export type SubscriberState = 'idle' | 'connecting' | 'connected' | 'failed' | 'stopped'

export interface StateDetails {
  lastError: StreamFailure | null
  /** `failed`: when the next handshake is due. */
  retryInMs?: number
}

export interface SubscriberStats {
  state: SubscriberState
  /** When the last batch of events arrived (ISO 8601), null before the first. */
  lastEventAt: string | null
  /** The replayId of the last event that `onEvents` accepted. */
  replayId: number | null
  /** Events that `onEvents` accepted. */
  received: number
  /** Handshakes after the first. */
  reconnects: number
  /** Events delivered without a replayId or a payload: logged and skipped. */
  dropped: number
  /** Whether the last handshake granted the replay extension (null before one); without it nothing is replayed. */
  replaySupported: boolean | null
  /** The last failure, or the defect of the last event dropped, whichever came later. */
  lastError: StreamFailure | null
}

export interface PlatformEventSubscriberOptions {
  crm: CrmSessions
  /** e.g. `60.0`: the endpoint is `{instanceUrl}/cometd/{apiVersion}`. */
  apiVersion: string
  /** e.g. `/event/OrderProvisionRequested__e` */
  channel: string
  /** The stored replay position, or -1 (new events) / -2 (every retained event); asked before every subscribe. */
  replayFrom: () => Promise<number>
  /** Subscribes with this when the Streaming API no longer has the stored position (default -1). */
  fallbackReplay?: -1 | -2
  /** Told the stored position that was refused, before the fallback subscription. */
  onInvalidReplay?: (replayId: number) => void | Promise<void>
  /**
   * Each batch, in replayId order. The next /meta/connect waits for it; a rejection ends the session, and
   * the next one subscribes from `replayFrom()` again, so that nothing is lost.
   */
  onEvents: (events: PlatformEventMessage[]) => Promise<void>
  onState?: (state: SubscriberState, details: StateDetails) => void
  log?: UpstreamLogger
  /** Watchdog: a /meta/connect unanswered after advice.timeout plus this is abandoned (default 10 000 ms). */
  connectTimeoutMarginMs?: number
  /** Bound on a handshake or subscribe (default 10 000 ms). */
  requestTimeoutMs?: number
  /** Delay before the next handshake after a failure: full jitter up to initialMs doubling to maxMs (500, 30 000). */
  backoff?: { initialMs?: number, maxMs?: number }
  /** The jitter's source (Math.random): a test fixes it to see the backoff's bound. */
  random?: () => number
}

/** A handshaken Bayeux client and the advice it follows. */
interface Connection {
  transport: BayeuxTransport
  session: CrmSession
  clientId: string
  timeoutMs: number
  intervalMs: number
}

/** Salesforce's advice.timeout, used until the server gives its own. */
const DEFAULT_CONNECT_TIMEOUT_MS = 110_000
const DISCONNECT_TIMEOUT_MS = 1000
/** How long the subscribe waits for the first connect's answer before it goes out beside it. */
const FIRST_CONNECT_GRACE_MS = 1000
/** Unsuccessful or lost connects in a row sent again by the same client before handshaking anew. */
const CONNECT_RETRIES = 3

const ignore = (): void => {}
const SILENT: UpstreamLogger = { debug: ignore, info: ignore, warn: ignore, error: ignore }

/**
 * One subscription to one platform event channel over the Streaming API (CometD / Bayeux 1.0, long
 * polling), with the replay extension, kept alive by a supervisor: after a failure it backs off
 * (exponential, full jitter), gets a session (a new one when the old was refused), handshakes and
 * subscribes again from `replayFrom()`.
 */
export class PlatformEventSubscriber {
  readonly channel: string
  readonly #crm: CrmSessions
  readonly #apiVersion: string
  readonly #replayFrom: () => Promise<number>
  readonly #fallbackReplay: -1 | -2
  readonly #onInvalidReplay: (replayId: number) => void | Promise<void>
  readonly #onEvents: (events: PlatformEventMessage[]) => Promise<void>
  readonly #onState: (state: SubscriberState, details: StateDetails) => void
  readonly #log: UpstreamLogger
  readonly #connectTimeoutMarginMs: number
  readonly #requestTimeoutMs: number
  /** Its count of failures is reset once a batch is handed off, or once a session lasted the longest delay. */
  readonly #backoff: Backoff
  readonly #lifetime = new AbortController()
  #running: Promise<void> | undefined
  #transport: BayeuxTransport | undefined
  /** The client to disconnect on stop, while it is one the server knows. */
  #connection: Connection | undefined
  #nextMessageId = 1
  #handshakes = 0
  #state: SubscriberState = 'idle'
  #lastError: StreamFailure | null = null
  #lastEventAt: string | null = null
  #replayId: number | null = null
  #received = 0
  #dropped = 0
  #replaySupported: boolean | null = null
  #handshookAtOnceAt = -Infinity

  constructor (options: PlatformEventSubscriberOptions) {
    this.channel = options.channel
    this.#crm = options.crm
    this.#apiVersion = options.apiVersion
    this.#replayFrom = options.replayFrom
    this.#fallbackReplay = options.fallbackReplay ?? -1
    this.#onInvalidReplay = options.onInvalidReplay ?? ignore
    this.#onEvents = options.onEvents
    this.#onState = options.onState ?? ignore
    this.#log = options.log ?? SILENT
    this.#connectTimeoutMarginMs = options.connectTimeoutMarginMs ?? 10_000
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10_000
    this.#backoff = new Backoff(options.backoff, options.random)
  }

  /** Runs until stop() or until `signal` aborts; resolves once stopped, and never rejects. */
  start (signal?: AbortSignal): Promise<void> {
    if (this.#running !== undefined) throw new Error(`the subscription to ${this.channel} was started already`)
    signal?.addEventListener('abort', () => this.#lifetime.abort(), { once: true })
    if (signal?.aborted === true) this.#lifetime.abort()
    this.#running = this.#supervise(this.#lifetime.signal)
    return this.#running
  }

  /** Abandons the long poll in flight, says /meta/disconnect (bounded) and closes the connections. */
  async stop (): Promise<void> {
    this.#lifetime.abort()
    await this.#running
  }

  stats (): SubscriberStats {
    return {
      state: this.#state,
      lastEventAt: this.#lastEventAt,
      replayId: this.#replayId,
      received: this.#received,
      reconnects: Math.max(0, this.#handshakes - 1),
      dropped: this.#dropped,
      replaySupported: this.#replaySupported,
      lastError: this.#lastError
    }
  }

  async #supervise (signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      this.#setState('connecting')
      const interruption = await this.#subscription(signal)
      if (signal.aborted) break
      // A session given up is ended before the next handshake: the server would otherwise keep it,
      // and queue events for it, until it times out. One it forgot already needs no word.
      if (HANDSHAKE_AT_ONCE.has(interruption.failure)) this.#connection = undefined
      else await this.#disconnect()
      this.#lastError = interruption.failure
      const details = { channel: this.channel, failure: interruption.failure, ...(interruption.cause === undefined ? {} : { err: interruption.cause }) }
      // Bayeux: the next handshake waits at least the interval the server advised (bounded here by the
      // longest backoff). A healthy stream that the server asks to handshake again does so after that
      // alone; twice in a row backs off, as does a second one within the longest backoff (a server
      // that takes the subscribe and forgets the client at once must not be handshaken in a loop).
      const intervalMs = Math.min(interruption.intervalMs, this.#backoff.maxMs)
      if (HANDSHAKE_AT_ONCE.has(interruption.failure) && this.#backoff.failures === 0 && Date.now() - this.#handshookAtOnceAt >= this.#backoff.maxMs) {
        this.#backoff.failures = 1
        this.#handshookAtOnceAt = Date.now()
        this.#log.info({ ...details, ...(intervalMs > 0 ? { retryInMs: intervalMs } : {}) }, `platform event stream: ${interruption.message}; handshaking again`)
        if (intervalMs > 0) await sleep(intervalMs, undefined, { signal }).catch(ignore)
        continue
      }
      // Bayeux: a client must not retry on its own after `reconnect: none`; a service must come back
      // some time, so it waits the longest backoff, not a random part of it.
      const retryInMs = interruption.failure === 'reconnect_none' ? this.#backoff.maxMs : Math.max(intervalMs, this.#backoff.delayMs())
      this.#backoff.failures++
      this.#log.warn({ ...details, retryInMs }, `platform event stream failed: ${interruption.message}`)
      this.#setState('failed', retryInMs)
      await sleep(retryInMs, undefined, { signal }).catch(ignore)
    }
    await this.#disconnect()
    await this.#transport?.close()
    this.#log.info({ channel: this.channel }, 'platform event subscription stopped')
    this.#setState('stopped')
  }

  /** One session: handshake, a first connect, subscribe, then /meta/connect until something interrupts it. */
  async #subscription (signal: AbortSignal): Promise<StreamInterruption> {
    let session: CrmSession | undefined
    // A first connect that a server holds ends with this session, not only with the subscriber.
    const sessionEnd = new AbortController()
    const endSession = (): void => sessionEnd.abort()
    signal.addEventListener('abort', endSession, { once: true })
    try {
      session = await this.#crm.session(signal)
      const connection = await this.#handshake(this.#transportFor(session.instanceUrl), session, signal)
      // Bayeux: a client subscribes once connected. The first connect asks to be answered at once
      // (advice timeout 0, as the CometD clients send it), and CometD servers answer it at once
      // anyway; from a server that holds it all the same, it carries the first events.
      let held: Promise<BayeuxMessage> | undefined = this.#connect(connection, sessionEnd.signal, { timeout: 0 })
      held.catch(ignore)
      const first = await Promise.race([held, sleep(FIRST_CONNECT_GRACE_MS, undefined, { signal })])
      if (first !== undefined) {
        held = undefined
        if (first.successful !== true || isReconnectRefused(first)) throw refusal(first)
        this.#follow(connection, first)
      }
      const replayId = await this.#subscribe(connection, signal)
      // Subscribing proves little (a batch refused at once would loop): the backoff is not reset here.
      const subscribedAt = performance.now()
      const degraded = this.#replaySupported === false
      this.#log.info({ channel: this.channel, replayId, ...(degraded ? { replaySupported: false } : {}) },
        degraded ? `subscribed to ${this.channel} without replay: the server ignores replayId ${replayId}` : `subscribed to ${this.channel}`)
      this.#setState('connected')
      let unsuccessful = 0
      for (;;) {
        if (held === undefined && connection.intervalMs > 0) await sleep(connection.intervalMs, undefined, { signal })
        const pending = held ?? this.#connect(connection, signal)
        held = undefined
        const reply = await pending.catch((error: unknown) => {
          if (signal.aborted) throw error
          return interruptionOf(error)
        })
        let interruption: StreamInterruption
        if (reply instanceof StreamInterruption) {
          // An answer lost on the way (5xx, refused, unreadable) says nothing of the client: it connects
          // again, as CometD's clients do. A connect unanswered in time handshakes anew (the watchdog).
          if (!LOST_ANSWERS.has(reply.failure)) throw reply
          interruption = reply
        } else if (reply.successful !== true) {
          interruption = refusal(reply)
          // Bayeux: an unsuccessful connect advised `retry` (or as before) is sent again by the same client.
          if (interruption.failure !== 'upstream_error' || isReconnectRefused(reply)) throw interruption
          this.#follow(connection, reply)
        } else {
          if (isReconnectRefused(reply)) throw refusal(reply)
          this.#follow(connection, reply)
          unsuccessful = 0
          if (performance.now() - subscribedAt >= this.#backoff.maxMs) this.#backoff.failures = 0
          continue
        }
        if (unsuccessful >= CONNECT_RETRIES) throw interruption
        unsuccessful++
        this.#log.warn({ channel: this.channel, attempt: unsuccessful }, `platform event stream: ${interruption.message}; connecting again`)
        await sleep(this.#backoff.delayMs(unsuccessful - 1), undefined, { signal })
      }
    } catch (error) {
      const interruption = interruptionOf(error)
      if (interruption.failure === 'auth_failed' && session !== undefined) this.#crm.invalidateSession(session)
      return interruption
    } finally {
      signal.removeEventListener('abort', endSession)
      sessionEnd.abort()
    }
  }

  /** The transport to the session's instance: a new one (with an empty cookie jar) when the instance changes. */
  #transportFor (instanceUrl: string): BayeuxTransport {
    if (this.#transport?.instanceUrl !== instanceUrl) {
      this.#transport?.close().catch(ignore)
      this.#transport = new BayeuxTransport(instanceUrl, this.#apiVersion)
    }
    return this.#transport
  }

  async #handshake (transport: BayeuxTransport, session: CrmSession, signal: AbortSignal): Promise<Connection> {
    this.#handshakes++
    const reply = await this.#send({ transport, session }, handshakeMessage(), this.#requestTimeoutMs, signal)
    if (reply.successful !== true || typeof reply.clientId !== 'string') throw refusal(reply)
    // Degraded, not failed: the stream works, but what is published while it is down is lost.
    this.#replaySupported = grantsReplay(reply)
    if (!this.#replaySupported) this.#log.warn({ channel: this.channel, replaySupported: false }, 'platform event stream degraded: the handshake grants no replay extension; events published while disconnected are lost')
    const connection: Connection = { transport, session, clientId: reply.clientId, timeoutMs: DEFAULT_CONNECT_TIMEOUT_MS, intervalMs: 0 }
    this.#follow(connection, reply)
    this.#connection = connection
    return connection
  }

  /** One long poll, given the advised timeout plus the watchdog's margin. */
  #connect (connection: Connection, signal: AbortSignal, advice?: { timeout: number }): Promise<BayeuxMessage> {
    return this.#send(connection, connectMessage(connection.clientId, advice), connection.timeoutMs + this.#connectTimeoutMarginMs, signal)
  }

  /** Subscribes from `replayFrom()`, or from the fallback when that position is gone; answers the replayId used. */
  async #subscribe (connection: Connection, signal: AbortSignal): Promise<number> {
    const stored = await this.#callback('replay_unavailable', 'replayFrom() failed', () => this.#replayFrom(), signal)
    const reply = await this.#subscribeFrom(connection, stored, signal)
    if (reply.successful === true) return stored
    if (!isInvalidReplay(reply)) throw refusal(reply)
    this.#log.error({ channel: this.channel, replayId: stored, fallbackReplay: this.#fallbackReplay },
      `replayId ${stored} of ${this.channel} is no longer retained by the CRM; subscribing from ${this.#fallbackReplay}`)
    await this.#callback('replay_unavailable', 'onInvalidReplay() failed', () => this.#onInvalidReplay(stored), signal)
    const fallback = await this.#subscribeFrom(connection, this.#fallbackReplay, signal)
    if (fallback.successful !== true) throw refusal(fallback)
    return this.#fallbackReplay
  }

  #subscribeFrom (connection: Connection, replayId: number, signal: AbortSignal): Promise<BayeuxMessage> {
    return this.#send(connection, subscribeMessage(connection.clientId, this.channel, replayId), this.#requestTimeoutMs, signal)
  }

  /** Keeps the advice a reply carries: the long poll's timeout and the pause before the next connect. */
  #follow (connection: Connection, reply: BayeuxMessage): void {
    const { timeout, interval } = asRecord(reply.advice)
    if (typeof timeout === 'number' && timeout >= 0) connection.timeoutMs = timeout
    if (typeof interval === 'number' && interval >= 0) connection.intervalMs = interval
  }

  /**
   * Sends one message and answers its reply. Events that come in the same answer (they usually precede
   * a /meta/connect reply) are handed to `onEvents` first.
   */
  async #send ({ transport, session }: Pick<Connection, 'transport' | 'session'>, message: BayeuxMessage,
    timeoutMs: number, signal: AbortSignal): Promise<BayeuxMessage> {
    const id = String(this.#nextMessageId++)
    const replies = await transport.send([{ ...message, id }], session.accessToken, timeoutMs, signal)
    const { events, defective } = eventsIn(replies, this.channel)
    // Ending the session for one would bring it back from the same position: the stream would stall on it.
    for (const { defect, replayId } of defective) {
      this.#dropped++
      this.#lastError = defect
      this.#log.error({ channel: this.channel, failure: defect, dropped: this.#dropped, replayId },
        `platform event stream: an event without its ${defect === 'event_without_replay_id' ? 'replayId' : 'payload'}; skipped`)
    }
    if (events.length > 0) await this.#deliver(events, signal)
    return replyTo(replies, message, id)
  }

  async #deliver (events: PlatformEventMessage[], signal: AbortSignal): Promise<void> {
    this.#lastEventAt = new Date().toISOString()
    await this.#callback('events_rejected', 'onEvents() rejected a batch', () => this.#onEvents(events), signal)
    this.#backoff.failures = 0
    this.#received += events.length
    this.#replayId = events.at(-1)?.data.event.replayId ?? this.#replayId
    this.#log.debug({ channel: this.channel, events: events.length, replayId: this.#replayId }, 'platform events delivered')
  }

  /** Runs one of the service's callbacks; its failure ends the session, unless the subscriber is stopping. */
  async #callback<T> (failure: StreamFailure, message: string, run: () => T | Promise<T>, signal: AbortSignal): Promise<T> {
    try {
      return await abortable(Promise.resolve(run()), signal)
    } catch (error) {
      if (signal.aborted) throw error
      throw new StreamInterruption(failure, message, { cause: error })
    }
  }

  /** Best effort: the server would forget the client anyway, but later. */
  async #disconnect (): Promise<void> {
    const connection = this.#connection
    if (connection === undefined) return
    this.#connection = undefined
    try {
      await connection.transport.send([{ ...disconnectMessage(connection.clientId), id: String(this.#nextMessageId++) }],
        connection.session.accessToken, DISCONNECT_TIMEOUT_MS)
    } catch (error) {
      this.#log.debug({ channel: this.channel, failure: interruptionOf(error).failure }, 'platform event stream: /meta/disconnect failed')
    }
  }

  #setState (state: SubscriberState, retryInMs?: number): void {
    this.#state = state
    try {
      this.#onState(state, { lastError: this.#lastError, ...(retryInMs === undefined ? {} : { retryInMs }) })
    } catch (error) {
      this.#log.error({ channel: this.channel, err: error }, 'the platform event state observer threw; the subscription is unaffected')
    }
  }
}

// Written by hand rather than on Faye or jsforce: Faye does not surface `reconnect: none` advice, and
// jsforce's replay extension mishandles channels; the service needs full control of advice, replay and
// the watchdog.
import { setTimeout as sleep } from 'node:timers/promises'
import { abortable } from '../../lib/abortable.js'
import { Backoff } from './backoff.js'
import { BayeuxConnection, HandshakePacing, type ConnectionContext } from './bayeux-connection.js'
import {
  InstanceTransport, StreamInterruption, type BayeuxMessage, type BayeuxTransport, type StreamFailure
} from './bayeux-transport.js'
import {
  HANDSHAKE_AT_ONCE, platformEventsIn, interruptionOf, isInvalidReplay, refusal, type PlatformEventMessage
} from './bayeux-protocol.js'
import type { CrmSession } from './client.js'
import type {
  CrmSessions, PlatformEventSubscriberOptions, StateDetails, SubscriberState, SubscriberStats
} from './subscriber-options.js'
import type { UpstreamLogger } from '../upstream.js'

export type { CrmSessions, PlatformEventSubscriberOptions, StateDetails, SubscriberState, SubscriberStats }

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
  readonly #replayFrom: () => Promise<number>
  readonly #fallbackReplay: -1 | -2
  readonly #onInvalidReplay: (replayId: number) => void | Promise<void>
  readonly #onPlatformEvents: (events: PlatformEventMessage[]) => Promise<void>
  readonly #onState: (state: SubscriberState, details: StateDetails) => void
  readonly #log: UpstreamLogger
  /** Its count of failures is reset once a batch is handed off, or once a session lasted the longest delay. */
  readonly #backoff: Backoff
  readonly #pacing: HandshakePacing
  readonly #lifetime = new AbortController()
  #running: Promise<void> | undefined
  readonly #transport: InstanceTransport
  readonly #context: ConnectionContext
  /** The client to disconnect on stop, while it is one the server knows. */
  #connection: BayeuxConnection | undefined
  #nextMessageId = 1
  #handshakes = 0
  #state: SubscriberState = 'idle'
  #lastError: StreamFailure | null = null
  #lastEventAt: string | null = null
  #replayId: number | null = null
  #received = 0
  #dropped = 0
  #replaySupported: boolean | null = null

  constructor (options: PlatformEventSubscriberOptions) {
    this.channel = options.channel
    this.#crm = options.crm
    this.#transport = new InstanceTransport(options.apiVersion)
    this.#replayFrom = options.replayFrom
    this.#fallbackReplay = options.fallbackReplay ?? -1
    this.#onInvalidReplay = options.onInvalidReplay ?? ignore
    this.#onPlatformEvents = options.onPlatformEvents
    this.#onState = options.onState ?? ignore
    this.#log = options.log ?? SILENT
    this.#backoff = new Backoff(options.backoff, options.random)
    this.#pacing = new HandshakePacing(this.#backoff)
    this.#context = {
      channel: this.channel,
      nextId: () => String(this.#nextMessageId++),
      receive: (replies, signal) => this.#receive(replies, signal),
      requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
      connectTimeoutMarginMs: options.connectTimeoutMarginMs ?? 10_000,
      log: this.#log
    }
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
      const details = {
        channel: this.channel,
        failure: interruption.failure,
        ...(interruption.cause === undefined ? {} : { err: interruption.cause })
      }
      const { atOnce, waitMs: retryInMs } = this.#pacing.next(interruption)
      if (atOnce) {
        this.#log.info({ ...details, ...(retryInMs > 0 ? { retryInMs } : {}) }, `platform-event subscription: ${interruption.message}; handshaking again`)
        if (retryInMs > 0) await sleep(retryInMs, undefined, { signal }).catch(ignore)
        continue
      }
      this.#log.warn({ ...details, retryInMs }, `platform-event subscription failed: ${interruption.message}`)
      this.#setState('failed', retryInMs)
      await sleep(retryInMs, undefined, { signal }).catch(ignore)
    }
    await this.#disconnect()
    await this.#transport.close()
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
      const connection = await this.#handshake(this.#transport.for(session.instanceUrl), session, signal)
      const { held } = await connection.connectFirst(sessionEnd.signal, signal)
      const replayId = await this.#subscribe(connection, signal)
      // Subscribing proves little (a batch refused at once would loop): the backoff is not reset here.
      const degraded = this.#replaySupported === false
      this.#log.info({ channel: this.channel, replayId, ...(degraded ? { replaySupported: false } : {}) },
        degraded ? `subscribed to ${this.channel} without replay: the server ignores replayId ${replayId}` : `subscribed to ${this.channel}`)
      this.#setState('connected')
      return await connection.longPoll(held, this.#backoff, signal)
    } catch (error) {
      const interruption = interruptionOf(error)
      if (interruption.failure === 'auth_failed' && session !== undefined) this.#crm.invalidateSession(session)
      return interruption
    } finally {
      signal.removeEventListener('abort', endSession)
      sessionEnd.abort()
    }
  }

  async #handshake (transport: BayeuxTransport, session: CrmSession, signal: AbortSignal): Promise<BayeuxConnection> {
    this.#handshakes++
    const connection = await BayeuxConnection.handshake(this.#context, transport, session, signal)
    // Degraded, not failed: the stream works, but what is published while it is down is lost.
    this.#replaySupported = connection.replaySupported
    if (!this.#replaySupported) {
      this.#log.warn(
        { channel: this.channel, replaySupported: false },
        'platform-event subscription degraded: the handshake grants no replay extension; events published while disconnected are lost'
      )
    }
    this.#connection = connection
    return connection
  }

  /** Subscribes from `replayFrom()`, or from the fallback when that position is gone; answers the replayId used. */
  async #subscribe (connection: BayeuxConnection, signal: AbortSignal): Promise<number> {
    const stored = await this.#callback('replay_unavailable', 'replayFrom() failed', () => this.#replayFrom(), signal)
    const reply = await connection.subscribe(stored, signal)
    if (reply.successful === true) return stored
    if (!isInvalidReplay(reply)) throw refusal(reply)
    this.#log.error({ channel: this.channel, replayId: stored, fallbackReplay: this.#fallbackReplay },
      `replayId ${stored} of ${this.channel} is no longer retained by the CRM; subscribing from ${this.#fallbackReplay}`)
    await this.#callback('replay_unavailable', 'onInvalidReplay() failed', () => this.#onInvalidReplay(stored), signal)
    const fallback = await connection.subscribe(this.#fallbackReplay, signal)
    if (fallback.successful !== true) throw refusal(fallback)
    return this.#fallbackReplay
  }

  /** An answer's messages, before its reply is read: its events are handed to `onPlatformEvents`. */
  async #receive (replies: BayeuxMessage[], signal: AbortSignal): Promise<void> {
    const { events, defective } = platformEventsIn(replies, this.channel)
    // Ending the session for one would bring it back from the same position: the stream would stall on it.
    for (const { defect, replayId } of defective) {
      this.#dropped++
      this.#lastError = defect
      this.#log.error({ channel: this.channel, failure: defect, dropped: this.#dropped, replayId },
        `platform-event subscription: an event without its ${defect === 'event_without_replay_id' ? 'replayId' : 'payload'}; skipped`)
    }
    if (events.length > 0) await this.#deliver(events, signal)
  }

  async #deliver (events: PlatformEventMessage[], signal: AbortSignal): Promise<void> {
    this.#lastEventAt = new Date().toISOString()
    await this.#callback(
      'events_rejected',
      'onPlatformEvents() rejected a batch',
      () => this.#onPlatformEvents(events),
      signal
    )
    this.#backoff.failures = 0
    this.#received += events.length
    this.#replayId = events.at(-1)?.data.event.replayId ?? this.#replayId
    this.#log.debug(
      { channel: this.channel, events: events.length, replayId: this.#replayId },
      'platform events delivered'
    )
  }

  /** Runs one of the service's callbacks; its failure ends the session, unless the subscriber is stopping. */
  async #callback<T> (
    failure: StreamFailure,
    message: string,
    run: () => T | Promise<T>,
    signal: AbortSignal
  ): Promise<T> {
    try {
      return await abortable(Promise.resolve(run()), signal)
    } catch (error) {
      if (signal.aborted) throw error
      throw new StreamInterruption(failure, message, { cause: error })
    }
  }

  async #disconnect (): Promise<void> {
    const connection = this.#connection
    this.#connection = undefined
    await connection?.disconnect()
  }

  #setState (state: SubscriberState, retryInMs?: number): void {
    this.#state = state
    try {
      this.#onState(state, { lastError: this.#lastError, ...(retryInMs === undefined ? {} : { retryInMs }) })
    } catch (error) {
      this.#log.error(
        { channel: this.channel, err: error },
        'the platform event state observer threw; the subscription is unaffected'
      )
    }
  }
}

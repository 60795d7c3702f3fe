import { setTimeout as sleep } from 'node:timers/promises'
import type { Backoff } from './backoff.js'
import { StreamInterruption, type BayeuxMessage, type BayeuxTransport } from './bayeux-transport.js'
import {
  HANDSHAKE_AT_ONCE, LOST_ANSWERS, connectMessage, disconnectMessage, grantsReplay, handshakeMessage, interruptionOf,
  isReconnectRefused, refusal, replyTo, subscribeMessage
} from './bayeux-protocol.js'
import type { CrmSession } from './client.js'
import { asRecord, type UpstreamLogger } from '../upstream.js'

/** Salesforce's advice.timeout, used until the server gives its own. */
const DEFAULT_CONNECT_TIMEOUT_MS = 110_000
const DISCONNECT_TIMEOUT_MS = 1000
/** How long the subscribe waits for the first connect's answer before it goes out beside it. */
const FIRST_CONNECT_GRACE_MS = 1000
/** Unsuccessful or lost connects in a row sent again by the same client before handshaking anew. */
const CONNECT_RETRIES = 3

const ignore = (): void => {}

/** What every connection of one subscriber shares. */
export interface ConnectionContext {
  channel: string
  /** The next message id: unique for the subscriber's life. */
  nextId: () => string
  /**
   * Takes every answer's messages before its reply is read: events that come in the same answer
   * (they usually precede a /meta/connect reply) are handed over first.
   */
  receive: (replies: BayeuxMessage[], signal: AbortSignal) => Promise<void>
  /** Bound on a handshake or subscribe. */
  requestTimeoutMs: number
  /** Watchdog: a /meta/connect unanswered after advice.timeout plus this is abandoned. */
  connectTimeoutMarginMs: number
  log: UpstreamLogger
}

type Endpoint = Pick<BayeuxConnection, 'transport' | 'session'>

/** Sends one message and answers its reply, once the answer's messages are received. */
async function exchange (context: ConnectionContext, { transport, session }: Endpoint, message: BayeuxMessage,
  timeoutMs: number, signal: AbortSignal): Promise<BayeuxMessage> {
  const id = context.nextId()
  const replies = await transport.send([{ ...message, id }], session.accessToken, timeoutMs, signal)
  await context.receive(replies, signal)
  return replyTo(replies, message, id)
}

/** A handshaken Bayeux client and the advice it follows. */
export class BayeuxConnection {
  /** The long poll's timeout (advice.timeout). */
  timeoutMs = DEFAULT_CONNECT_TIMEOUT_MS
  /** The pause before the next connect (advice.interval). */
  intervalMs = 0

  private constructor (
    private readonly context: ConnectionContext,
    readonly transport: BayeuxTransport,
    readonly session: CrmSession,
    readonly clientId: string,
    /** Whether the handshake granted the replay extension. */
    readonly replaySupported: boolean
  ) {}

  /** A new client, handshaken with the session on its instance; a refusal is thrown as the stream's interruption. */
  static async handshake (
    context: ConnectionContext,
    transport: BayeuxTransport,
    session: CrmSession,
    signal: AbortSignal
  ): Promise<BayeuxConnection> {
    const reply = await exchange(context, { transport, session }, handshakeMessage(), context.requestTimeoutMs, signal)
    if (reply.successful !== true || typeof reply.clientId !== 'string') throw refusal(reply)
    const connection = new BayeuxConnection(context, transport, session, reply.clientId, grantsReplay(reply))
    connection.#follow(reply)
    return connection
  }

  /**
   * Bayeux: a client subscribes once connected. The first connect asks to be answered at once
   * (advice timeout 0, as the CometD clients send it), and CometD servers answer it at once
   * anyway; from a server that holds it all the same, it carries the first events. Answers that
   * connect while it is held (`held` undefined once answered); `holdUntil` bounds how long it may be.
   */
  async connectFirst (
    holdUntil: AbortSignal,
    signal: AbortSignal
  ): Promise<{ held: Promise<BayeuxMessage> | undefined }> {
    const pending = this.#connect(holdUntil, { timeout: 0 })
    pending.catch(ignore)
    const first = await Promise.race([pending, sleep(FIRST_CONNECT_GRACE_MS, undefined, { signal })])
    if (first === undefined) return { held: pending }
    if (first.successful !== true || isReconnectRefused(first)) throw refusal(first)
    this.#follow(first)
    return { held: undefined }
  }

  subscribe (replayId: number, signal: AbortSignal): Promise<BayeuxMessage> {
    return exchange(
      this.context,
      this,
      subscribeMessage(this.clientId, this.context.channel, replayId),
      this.context.requestTimeoutMs,
      signal
    )
  }

  /**
   * Long polls (/meta/connect) until something interrupts it, which it throws; `held` is the first
   * connect when the server held it. The backoff's count of failures is reset once the connection
   * has lasted the longest delay.
   */
  async longPoll (held: Promise<BayeuxMessage> | undefined, backoff: Backoff, signal: AbortSignal): Promise<never> {
    const since = performance.now()
    let unsuccessful = 0
    for (;;) {
      if (held === undefined && this.intervalMs > 0) await sleep(this.intervalMs, undefined, { signal })
      const pending = held ?? this.#connect(signal)
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
        this.#follow(reply)
      } else {
        if (isReconnectRefused(reply)) throw refusal(reply)
        this.#follow(reply)
        unsuccessful = 0
        if (performance.now() - since >= backoff.maxMs) backoff.failures = 0
        continue
      }
      if (unsuccessful >= CONNECT_RETRIES) throw interruption
      unsuccessful++
      this.context.log.warn({ channel: this.context.channel, attempt: unsuccessful }, `platform-event subscription: ${interruption.message}; connecting again`)
      await sleep(backoff.delayMs(unsuccessful - 1), undefined, { signal })
    }
  }

  /** Best effort: the server would forget the client anyway, but later. */
  async disconnect (): Promise<void> {
    try {
      await this.transport.send(
        [{ ...disconnectMessage(this.clientId), id: this.context.nextId() }],
        this.session.accessToken,
        DISCONNECT_TIMEOUT_MS
      )
    } catch (error) {
      this.context.log.debug(
        { channel: this.context.channel, failure: interruptionOf(error).failure },
        'platform-event subscription: /meta/disconnect failed'
      )
    }
  }

  /** One long poll, given the advised timeout plus the watchdog's margin. */
  #connect (signal: AbortSignal, advice?: { timeout: number }): Promise<BayeuxMessage> {
    return exchange(
      this.context,
      this,
      connectMessage(this.clientId, advice),
      this.timeoutMs + this.context.connectTimeoutMarginMs,
      signal
    )
  }

  /** Keeps the advice a reply carries: the long poll's timeout and the pause before the next connect. */
  #follow (reply: BayeuxMessage): void {
    const { timeout, interval } = asRecord(reply.advice)
    if (typeof timeout === 'number' && timeout >= 0) this.timeoutMs = timeout
    if (typeof interval === 'number' && interval >= 0) this.intervalMs = interval
  }
}

/** When the next handshake goes out after an interruption: after the server's advice alone, or after a backoff. */
export class HandshakePacing {
  #atOnceAt = -Infinity

  constructor (private readonly backoff: Backoff) {}

  /** The wait before the next handshake; `atOnce` when it is not counted as a failure. */
  next (interruption: StreamInterruption): { atOnce: boolean, waitMs: number } {
    // Bayeux: the next handshake waits at least the interval the server advised (bounded here by the
    // longest backoff). A healthy stream that the server asks to handshake again does so after that
    // alone; twice in a row backs off, as does a second one within the longest backoff (a server
    // that takes the subscribe and forgets the client at once must not be handshaken in a loop).
    const intervalMs = Math.min(interruption.intervalMs, this.backoff.maxMs)
    if (
      HANDSHAKE_AT_ONCE.has(interruption.failure) &&
      this.backoff.failures === 0 &&
      Date.now() - this.#atOnceAt >= this.backoff.maxMs
    ) {
      this.backoff.failures = 1
      this.#atOnceAt = Date.now()
      return { atOnce: true, waitMs: intervalMs }
    }
    // Bayeux: a client must not retry on its own after `reconnect: none`; a service must come back
    // some time, so it waits the longest backoff, not a random part of it.
    const waitMs =
      interruption.failure === 'reconnect_none' ? this.backoff.maxMs : Math.max(intervalMs, this.backoff.delayMs())
    this.backoff.failures++
    return { atOnce: false, waitMs }
  }
}

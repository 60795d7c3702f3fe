import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { revocationChannel } from '../redis-keys.js'
import { databaseOf } from '../../external/redis-connection.js'

/** `GET /api/events`, registered in the portal API (app.ts). */
export { default as streamRoutes } from './routes.js'

export interface StreamOwner {
  clientId: number
  /** The token's `jti`, or the session's id. */
  jti: string
  /** The token's expiry, or the session's absolute end, in seconds since the epoch. */
  exp: number
  /**
   * Opened with a cookie session, which may end at any time (idle, lost with Redis's data): asked after every
   * few seconds.
   */
  session?: boolean
}

export type StreamEnd = 'logged_out' | 'expired' | 'shutdown'

/** Why a stream was refused: its user holds the most it may, or the instance does. */
export type StreamRefusal = 'user_limit' | 'instance_limit'

export interface StreamCounts {
  open: number
  refused: Record<StreamRefusal, number>
}

/** What the registry needs of a stream. */
export interface RegisteredStream {
  readonly owner: StreamOwner
  /** Ends the stream from outside: its token logged out or expired, the instance closing. */
  end (reason: StreamEnd): void
  /** Writes a comment line, so that proxies do not close an idle stream. */
  heartbeat (): void
}

/** A comment line every 15 s keeps proxies from closing an idle stream. */
export const HEARTBEAT_MS = 15_000
/**
 * How often the sessions of open streams are asked after: a stream ends within this long (and a Redis round
 * trip) of its session.
 */
const SESSION_CHECK_MS = 2000
/** The streams take turns for their heartbeat, a slice a second: all at once would hold the event loop. */
const HEARTBEAT_SLICES = 15

/**
 * The open `/api/events` streams of this instance. A user may hold `perUser` of them and the
 * instance `total`; one more is refused, never made room for by closing an older one (a browser
 * would reconnect it, and two tabs would take turns). A stream ends when its token is logged out
 * (on any instance: revocations are announced on Redis), when the token expires, when its session
 * is found gone (asked every few seconds), and at shutdown. One heartbeat timer serves every
 * stream, a fifteenth of them each second: a timer a stream would cost 10,000 streams 3 MB, and
 * writing to them all in one turn would hold every frame back.
 */
export class SseStreams {
  /** Each stream, with the timer that ends it when its token expires. */
  readonly #streams = new Map<RegisteredStream, NodeJS.Timeout>()
  readonly #perClient = new Map<number, number>()
  readonly #refused: Record<StreamRefusal, number> = { user_limit: 0, instance_limit: 0 }
  readonly #slices = Array.from({ length: HEARTBEAT_SLICES }, () => new Set<RegisteredStream>())
  #nextSlice = 0
  #beat = 0
  readonly #heartbeat: NodeJS.Timeout
  readonly #sessionCheck: NodeJS.Timeout | undefined
  #checking = false
  #closed = false

  constructor (private readonly limits: {
    perUser: number
    total: number
    heartbeatMs?: number
    /** Of these sessions, those that have ended, and why. */
    endedSessions?: (ids: string[]) => Promise<Map<string, StreamEnd>>
  }) {
    this.#heartbeat = setInterval(() => {
      for (const stream of this.#slices[this.#beat++ % HEARTBEAT_SLICES]!) stream.heartbeat()
    }, (limits.heartbeatMs ?? HEARTBEAT_MS) / HEARTBEAT_SLICES).unref()
    if (limits.endedSessions !== undefined) {
      this.#sessionCheck = setInterval(() => {
        this.#endStreamsOfEndedSessions().catch(() => {})
      }, SESSION_CHECK_MS).unref()
    }
  }

  /** Opens a stream, or says why not; its `end` is called once when it must end. */
  open (stream: RegisteredStream): StreamRefusal | undefined {
    // A stream whose request passed its checks as the instance began to close would hold the close
    // until its timeout: refused as by a full instance (503, retry shortly), uncounted.
    if (this.#closed) return 'instance_limit'
    if (this.#streams.size >= this.limits.total) return this.#refuse('instance_limit')
    const { clientId } = stream.owner
    const held = this.#perClient.get(clientId) ?? 0
    if (held >= this.limits.perUser) return this.#refuse('user_limit')
    this.#streams.set(stream, this.#expiry(stream))
    this.#perClient.set(clientId, held + 1)
    this.#slices[this.#nextSlice++ % HEARTBEAT_SLICES]!.add(stream)
    return undefined
  }

  /** A stream ended by itself (its client went away, Redis failed): forgotten, its place freed. */
  release (stream: RegisteredStream): boolean {
    const expiry = this.#streams.get(stream)
    if (expiry === undefined) return false
    this.#streams.delete(stream)
    clearTimeout(expiry)
    for (const slice of this.#slices) if (slice.delete(stream)) break
    const held = (this.#perClient.get(stream.owner.clientId) ?? 1) - 1
    if (held === 0) this.#perClient.delete(stream.owner.clientId)
    else this.#perClient.set(stream.owner.clientId, held)
    return true
  }

  /** Ends every stream opened with this token. */
  endToken (jti: string): void {
    for (const stream of this.#streams.keys()) if (stream.owner.jti === jti) this.#end(stream, 'logged_out')
  }

  /** Ends every stream, and refuses those asked for from now on: the instance is closing. */
  close (): void {
    this.#closed = true
    clearInterval(this.#heartbeat)
    clearInterval(this.#sessionCheck)
    for (const stream of this.#streams.keys()) this.#end(stream, 'shutdown')
  }

  counts (): StreamCounts {
    return { open: this.#streams.size, refused: { ...this.#refused } }
  }

  // A timer's delay is at most 2^31-1 ms (24 days); a token or session lives hours, so this never clamps.
  #expiry (stream: RegisteredStream): NodeJS.Timeout {
    return setTimeout(() => this.#end(stream, 'expired'), Math.max(0, stream.owner.exp * 1000 - Date.now()))
  }

  /**
   * A session may end without a word to the streams: it idles out, or Redis loses it (emptied,
   * restored, failed over). Its streams end within a check's interval (decision 0089). While Redis
   * cannot answer, they live on: the next check asks again.
   */
  async #endStreamsOfEndedSessions (): Promise<void> {
    if (this.#checking) return
    const sessions = new Set<string>()
    for (const stream of this.#streams.keys()) if (stream.owner.session === true) sessions.add(stream.owner.jti)
    if (sessions.size === 0) return
    this.#checking = true
    try {
      const ended = await this.limits.endedSessions!([...sessions])
      for (const stream of this.#streams.keys()) {
        const reason = stream.owner.session === true ? ended.get(stream.owner.jti) : undefined
        if (reason !== undefined) this.#end(stream, reason)
      }
    } finally {
      this.#checking = false
    }
  }

  #refuse (reason: StreamRefusal): StreamRefusal {
    this.#refused[reason]++
    return reason
  }

  #end (stream: RegisteredStream, reason: StreamEnd): void {
    if (this.release(stream)) stream.end(reason)
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    sseStreams: SseStreams
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    streams: StreamCounts
  }
}

async function sseStreams (fastify: FastifyInstance) {
  const { SSE_MAX_STREAMS_PER_USER, SSE_MAX_STREAMS, REDIS_KEY_PREFIX } = fastify.config
  const streams = new SseStreams({
    perUser: SSE_MAX_STREAMS_PER_USER,
    total: SSE_MAX_STREAMS,
    endedSessions: (ids) => fastify.sessions.ended(ids)
  })
  fastify.decorate('sseStreams', streams)

  await fastify.pubsub.subscribe(revocationChannel(REDIS_KEY_PREFIX, databaseOf(fastify.redis)), (jti) =>
    streams.endToken(jti)
  )

  // Before the listener closes: open streams would otherwise hold the shutdown until its timeout.
  fastify.addHook('preClose', async () => streams.close())

  fastify.monitoring.register('streams', {
    description: 'the SSE streams',
    read: () => streams.counts(),
    metrics: [
      {
        name: 'portal_bff_sse_streams_open',
        help: 'Open /api/events streams of this instance',
        type: 'gauge',
        samples: ({ open }) => [{ value: open }]
      },
      {
        name: 'portal_bff_sse_streams_refused_total',
        help: 'Streams refused because the user (user_limit) or the instance (instance_limit) held the most it may',
        type: 'counter',
        samples: ({ refused }) => Object.entries(refused).map(([reason, value]) => ({ labels: { reason }, value }))
      }
    ]
  })
}

export default fp(sseStreams, {
  name: 'sse-streams',
  fastify: '5.x',
  dependencies: ['pubsub', 'monitoring', 'sessions'],
  decorators: { fastify: ['config'] }
})

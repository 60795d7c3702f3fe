import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'

/** Who holds a stream: the portal user and the access token it was opened with. */
export interface StreamOwner {
  clientId: number
  jti: string
  /** The token's expiry, in seconds since the epoch. */
  exp: number
}

export type StreamEnd = 'logged_out' | 'expired' | 'shutdown'

/** Why a stream was refused: its user holds the most it may, or the instance does. */
export type StreamRefusal = 'user_limit' | 'instance_limit'

export interface StreamCounts {
  open: number
  refused: Record<StreamRefusal, number>
}

interface OpenStream {
  owner: StreamOwner
  end: (reason: StreamEnd) => void
  expiry: NodeJS.Timeout
}

/**
 * The open `/api/events` streams of this instance. A user may hold `perUser` of them and the
 * instance `total`; one more is refused, never made room for by closing an older one (a browser
 * would reconnect it, and two tabs would take turns). A stream ends when its token is logged out
 * (on any instance: revocations are announced on Redis), when the token expires, and at shutdown.
 */
export class EventStreams {
  readonly #streams = new Set<OpenStream>()
  readonly #perClient = new Map<number, number>()
  readonly #refused: Record<StreamRefusal, number> = { user_limit: 0, instance_limit: 0 }
  #closed = false

  constructor (private readonly limits: { perUser: number, total: number }) {}

  /** Opens a stream, or says why not; `end` is called once when the stream must end. */
  open (owner: StreamOwner, end: (reason: StreamEnd) => void): { close: () => void } | StreamRefusal {
    // A stream whose request passed its checks as the instance began to close would hold the close
    // until its timeout: refused as by a full instance (503, retry shortly), uncounted.
    if (this.#closed) return 'instance_limit'
    if (this.#streams.size >= this.limits.total) return this.#refuse('instance_limit')
    const held = this.#perClient.get(owner.clientId) ?? 0
    if (held >= this.limits.perUser) return this.#refuse('user_limit')
    const stream: OpenStream = {
      owner,
      end,
      // A timer's delay is at most 2^31-1 ms; a token lives minutes, so this never clamps.
      expiry: setTimeout(() => this.#end(stream, 'expired'), Math.max(0, owner.exp * 1000 - Date.now()))
    }
    this.#streams.add(stream)
    this.#perClient.set(owner.clientId, held + 1)
    return { close: () => this.#remove(stream) }
  }

  /** Ends every stream opened with this token. */
  endToken (jti: string): void {
    for (const stream of this.#streams) if (stream.owner.jti === jti) this.#end(stream, 'logged_out')
  }

  /** Ends every stream, and refuses those asked for from now on: the instance is closing. */
  close (): void {
    this.#closed = true
    for (const stream of this.#streams) this.#end(stream, 'shutdown')
  }

  counts (): StreamCounts {
    return { open: this.#streams.size, refused: { ...this.#refused } }
  }

  #refuse (reason: StreamRefusal): StreamRefusal {
    this.#refused[reason]++
    return reason
  }

  #end (stream: OpenStream, reason: StreamEnd): void {
    if (!this.#remove(stream)) return
    stream.end(reason)
  }

  #remove (stream: OpenStream): boolean {
    if (!this.#streams.delete(stream)) return false
    clearTimeout(stream.expiry)
    const held = (this.#perClient.get(stream.owner.clientId) ?? 1) - 1
    if (held === 0) this.#perClient.delete(stream.owner.clientId)
    else this.#perClient.set(stream.owner.clientId, held)
    return true
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    eventStreams: EventStreams
  }
}

declare module './monitoring/index.js' {
  interface MonitoringParts {
    streams: StreamCounts
  }
}

/** The channel every instance hears revocations on (the blacklist plugin publishes them). */
export function revocationChannel (keyPrefix: string): string {
  return `${keyPrefix}auth:revoked`
}

async function eventStreams (fastify: FastifyInstance) {
  const { SSE_MAX_STREAMS_PER_USER, SSE_MAX_STREAMS, REDIS_KEY_PREFIX } = fastify.config
  const streams = new EventStreams({ perUser: SSE_MAX_STREAMS_PER_USER, total: SSE_MAX_STREAMS })
  fastify.decorate('eventStreams', streams)

  // Subscriber mode takes a connection of its own. ioredis's own resubscription leaves its promise
  // unhandled when the connection drops again at once, so it is off and done here.
  const channel = revocationChannel(REDIS_KEY_PREFIX)
  const subscriber: Redis = fastify.redis.duplicate({ enableOfflineQueue: true, autoResubscribe: false })
  subscriber.on('error', () => {})
  subscriber.on('ready', () => {
    subscriber.subscribe(channel).catch((error: unknown) => fastify.log.warn({ err: error }, 'revocations: subscription failed; retried on the next reconnection'))
  })
  subscriber.on('message', (from: string, jti: string) => {
    if (from === channel) streams.endToken(jti)
  })

  // Before the listener closes: open streams would otherwise hold the shutdown until its timeout.
  fastify.addHook('preClose', async () => streams.close())
  // A subscriber has nothing to finish: dropped at once, it adds no wait on a hung Redis.
  fastify.addHook('onClose', async () => { subscriber.disconnect() })

  fastify.monitoring.register('streams', {
    description: 'the event streams',
    read: () => streams.counts(),
    metrics: [
      { name: 'portal_bff_event_streams_open', help: 'Open /api/events streams of this instance', type: 'gauge', samples: ({ open }) => [{ value: open }] },
      {
        name: 'portal_bff_event_streams_refused_total',
        help: 'Streams refused because the user (user_limit) or the instance (instance_limit) held the most it may',
        type: 'counter',
        samples: ({ refused }) => Object.entries(refused).map(([reason, value]) => ({ labels: { reason }, value }))
      }
    ]
  })
}

export default fp(eventStreams, { name: 'event-streams', fastify: '5.x', dependencies: ['redis', 'monitoring'], decorators: { fastify: ['config'] } })

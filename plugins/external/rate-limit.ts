import fp from 'fastify-plugin'
import fastifyRateLimit, { type FastifyRateLimitOptions, type FastifyRateLimitStore } from '@fastify/rate-limit'
import { format } from '@lukeed/ms'
import { createRequire } from 'node:module'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { RateLimitedError } from '../../lib/errors.js'
import { rateLimitPrefix } from '../app/redis-keys.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The per-client limit, for a credential check that counts its request in its own Redis command. */
    clientRequestLimit: ClientRequestLimit
  }
}

declare module '../app/monitoring/index.js' {
  interface MonitoringParts {
    /** Requests let through unlimited because Redis could not be asked, since start. */
    rateLimitBypassed: number
  }
}

type RedisStoreConstructor = new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  redis: unknown,
  key?: string
) => FastifyRateLimitStore
// The plugin's own Redis store: CommonJS, not exported by the package's entry point, and untyped.
const RedisStore = createRequire(import.meta.url)('@fastify/rate-limit/store/RedisStore.js') as RedisStoreConstructor

type Incr = (
  key: string,
  callback: (error: Error | null, result?: { current: number, ttl: number }) => void,
  ...rest: unknown[]
) => void

/**
 * The plugin's Redis store, reporting each command's outcome: `skipOnError` otherwise swallows
 * Redis failures silently, and while Redis is down limiting stops (specification §7), which operators must see.
 */
class ObservedStore implements FastifyRateLimitStore {
  constructor (
    private readonly inner: FastifyRateLimitStore,
    private readonly observe: (error: Error | null) => void
  ) {}

  incr (...[key, callback, ...rest]: Parameters<Incr>): void {
    (this.inner.incr as Incr).call(this.inner, key, (error, result) => {
      this.observe(error)
      callback(error, result)
    }, ...rest)
  }

  /**
   * The plugin gives each route a bucket of its own, named by its method and URL, even for routes
   * of one `groupId`: routes of a group share one here (both ways of signing in, say).
   */
  child (routeOptions: Parameters<FastifyRateLimitStore['child']>[0]): FastifyRateLimitStore {
    const { groupId } = routeOptions as { groupId?: string }
    const shared =
      groupId === undefined ? routeOptions : { ...routeOptions, routeInfo: { method: 'group:', url: groupId } }
    return new ObservedStore(this.inner.child(shared), this.observe)
  }
}

const clientKey = (clientId: number) => `client:${clientId}`

/** Per billing client when the request carries a verified token, per IP otherwise. */
function rateLimitKey (request: FastifyRequest): string {
  const clientId = (request.user as { clientId?: number } | undefined)?.clientId
  return clientId !== undefined ? clientKey(clientId) : `ip:${request.ip}`
}

/**
 * A request counted in its client's window, as the plugin's Redis store answers: the count so far, and the
 * window's ms left.
 */
export interface WindowCount { current: number, ttl: number }

/**
 * The per-client limit of the routes that have no limit of their own, for a check that counts a
 * request in a Redis command it sends anyway (the access token's, decision 0108): the plugin's key,
 * window and answer, its headers or 429. The plugin's hook then lets that request through uncounted.
 */
export class ClientRequestLimit {
  readonly #counted = new WeakSet<FastifyRequest>()

  constructor (
    private readonly keyPrefix: string,
    readonly max: number,
    readonly windowMs: number,
    private readonly observe: (error: Error | null) => void
  ) {}

  /**
   * Whether the route's requests count in their client's window (a route of its own limit, or none, counts
   * elsewhere or not at all).
   */
  limits (request: FastifyRequest): boolean {
    return request.routeOptions.config.rateLimit === undefined
  }

  /** The Redis key of the client's window: the plugin's store's. */
  key (clientId: number): string {
    return `${this.keyPrefix}${clientKey(clientId)}`
  }

  /**
   * Answers the request's count as the plugin's hook does: its headers, or 429 past the limit. A count Redis
   * could not take passes, as `skipOnError` lets it.
   */
  apply (request: FastifyRequest, reply: FastifyReply, count: WindowCount | Error): void {
    this.#counted.add(request)
    this.observe(count instanceof Error ? count : null)
    const { current, ttl } = count instanceof Error ? { current: 0, ttl: 0 } : count
    const ttlSeconds = Math.ceil(ttl / 1000)
    const exceeded = current > this.max
    reply.header('x-ratelimit-limit', this.max)
    reply.header('x-ratelimit-remaining', exceeded ? 0 : this.max - current)
    reply.header('x-ratelimit-reset', ttlSeconds)
    if (!exceeded) return
    reply.header('retry-after', ttlSeconds)
    throw new RateLimitedError(format(ttlSeconds * 1000, true))
  }

  counted (request: FastifyRequest): boolean {
    return this.#counted.has(request)
  }
}

const WINDOW_MS = 60_000

async function rateLimit (fastify: FastifyInstance) {
  const { RATE_LIMIT_MAX, REDIS_KEY_PREFIX } = fastify.config
  let bypassed = 0
  let failing = false
  const observe = (error: Error | null) => {
    if (error !== null) bypassed++
    if (error !== null && !failing) {
      fastify.log.error({ err: error }, 'rate limiting stopped: Redis is unavailable, requests pass unlimited')
    }
    if (error === null && failing) fastify.log.info({ bypassed }, 'rate limiting resumed')
    failing = error !== null
  }
  fastify.monitoring.register('rateLimitBypassed', {
    description: 'the rate limiter',
    read: () => bypassed,
    metrics: [{
      name: 'portal_bff_rate_limit_bypassed_total',
      help: 'Requests let through unlimited because the rate limiter could not reach Redis',
      type: 'counter',
      samples: (count) => [{ value: count }]
    }]
  })
  const limit = new ClientRequestLimit(rateLimitPrefix(REDIS_KEY_PREFIX), RATE_LIMIT_MAX, WINDOW_MS, observe)
  fastify.decorate('clientRequestLimit', limit)
  const Store = class extends ObservedStore {
    constructor (options: FastifyRateLimitOptions & { continueExceeding?: boolean, exponentialBackoff?: boolean }) {
      super(
        new RedisStore(
          options.continueExceeding ?? false,
          options.exponentialBackoff ?? false,
          fastify.redis,
          rateLimitPrefix(REDIS_KEY_PREFIX)
        ),
        observe
      )
    }
  }

  // Probes, metrics and the API documentation are never limited: they get no rate-limit hook at all.
  fastify.addHook('onRoute', (routeOptions) => {
    if (routeOptions.config?.probe === true || routeOptions.url?.startsWith('/docs') === true) {
      routeOptions.config = { ...routeOptions.config, rateLimit: false }
    }
  })
  await fastify.register(fastifyRateLimit, {
    global: true,
    max: RATE_LIMIT_MAX,
    timeWindow: WINDOW_MS,
    // After authentication, so a signed-in client is limited as itself.
    hook: 'preHandler',
    keyGenerator: rateLimitKey,
    // Counted already, with its credential's check.
    allowList: (request) => limit.counted(request),
    store: Store,
    skipOnError: true,
    errorResponseBuilder: (_request, context) => new RateLimitedError(context.after)
  })
}

export default fp(rateLimit, {
  name: 'rate-limit',
  fastify: '5.x',
  dependencies: ['redis', 'monitoring'],
  decorators: { fastify: ['config'] }
})

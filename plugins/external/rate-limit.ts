import fp from 'fastify-plugin'
import fastifyRateLimit, { type FastifyRateLimitOptions, type FastifyRateLimitStore } from '@fastify/rate-limit'
import { createRequire } from 'node:module'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { RateLimitedError } from '../../lib/errors.js'
import { rateLimitPrefix } from '../app/redis-keys.js'

declare module '../app/monitoring/index.js' {
  interface MonitoringParts {
    /** Requests let through unlimited because Redis could not be asked, since start. */
    rateLimitBypassed: number
  }
}

type RedisStoreConstructor = new (continueExceeding: boolean, exponentialBackoff: boolean, redis: unknown, key?: string) => FastifyRateLimitStore
// The plugin's own Redis store: CommonJS, not exported by the package's entry point, and untyped.
const RedisStore = createRequire(import.meta.url)('@fastify/rate-limit/store/RedisStore.js') as RedisStoreConstructor

type Incr = (key: string, callback: (error: Error | null, result?: { current: number, ttl: number }) => void, ...rest: unknown[]) => void

/**
 * The plugin's Redis store, reporting each command's outcome: `skipOnError` otherwise swallows
 * Redis failures silently, and while Redis is down limiting stops (specification §7), which operators must see.
 */
class ObservedStore implements FastifyRateLimitStore {
  constructor (private readonly inner: FastifyRateLimitStore, private readonly observe: (error: Error | null) => void) {}

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
    const shared = groupId === undefined ? routeOptions : { ...routeOptions, routeInfo: { method: 'group:', url: groupId } }
    return new ObservedStore(this.inner.child(shared), this.observe)
  }
}

/** Per billing client when the request carries a verified token, per IP otherwise. */
function rateLimitKey (request: FastifyRequest): string {
  const clientId = (request.user as { clientId?: number } | undefined)?.clientId
  return clientId !== undefined ? `client:${clientId}` : `ip:${request.ip}`
}

async function rateLimit (fastify: FastifyInstance) {
  const { RATE_LIMIT_MAX, REDIS_KEY_PREFIX } = fastify.config
  let bypassed = 0
  let failing = false
  const observe = (error: Error | null) => {
    if (error !== null) bypassed++
    if (error !== null && !failing) fastify.log.error({ err: error }, 'rate limiting stopped: Redis is unavailable, requests pass unlimited')
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
  const Store = class extends ObservedStore {
    constructor (options: FastifyRateLimitOptions & { continueExceeding?: boolean, exponentialBackoff?: boolean }) {
      super(new RedisStore(options.continueExceeding ?? false, options.exponentialBackoff ?? false, fastify.redis, rateLimitPrefix(REDIS_KEY_PREFIX)), observe)
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
    timeWindow: 60_000,
    // After authentication, so a signed-in client is limited as itself.
    hook: 'preHandler',
    keyGenerator: rateLimitKey,
    store: Store,
    skipOnError: true,
    errorResponseBuilder: (_request, context) => new RateLimitedError(context.after)
  })
}

export default fp(rateLimit, { name: 'rate-limit', fastify: '5.x', dependencies: ['redis', 'monitoring'], decorators: { fastify: ['config'] } })

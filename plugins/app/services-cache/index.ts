import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { abortable } from '../../../lib/abortable.js'
import { percentOf, round } from '../../../lib/numbers.js'
import { SlidingWindow } from '../../../lib/sliding-window.js'
import { windowed } from '../monitoring/alerts.js'
import type { PartMetric } from '../monitoring/index.js'
import { servicesCachePrefix } from '../redis-keys.js'

/** The cache probe, registered on the root outside the browser-facing scope (app.ts). */
export { default as servicesCacheRoutes } from './routes.js'

/** What is cached, and for how long (seconds): long enough to spare the upstream, short enough to stay fresh. */
export const CACHE_TTL_SECONDS = {
  client: 300,
  invoices: 60,
  invoice: 300
} as const

export type CacheKind = keyof typeof CACHE_TTL_SECONDS

export interface ServicesCacheStats {
  hits: number
  misses: number
  errors: number
  /** Percent of reads served from the cache; null before the first read. */
  hitRate: number | null
  latency: { averageMs: number | null, p95Ms: number | null }
}

export interface RedisMemory {
  usedBytes: number
  /** null when Redis has no maxmemory: there is no limit to judge against. */
  maxBytes: number | null
  percent: number | null
  keys: number
}

export interface ServicesCacheOptions {
  /** Told of the duration of every command Redis answered (the metrics histogram). */
  onCommand?: (durationMs: number) => void
}

const roundOrNull = (value: number | null) => value === null ? null : round(value)

/**
 * Cache-aside for upstream reads. Redis failing never fails a read: it counts as a miss and the
 * value comes from the upstream, as the specification says.
 */
export class ServicesCache {
  #hits = 0
  #misses = 0
  #errors = 0
  #available = true
  /** Durations of the commands Redis answered, over the recent window. */
  readonly #latency = new SlidingWindow()
  /** Reads over the recent window, a miss flagged as failed: the hit rate that alerts judge. */
  readonly #reads = new SlidingWindow()

  constructor (
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly log: Pick<FastifyBaseLogger, 'info' | 'warn'>,
    private readonly options: ServicesCacheOptions = {}
  ) {}

  async getOrLoad<T> (kind: CacheKind, key: string, load: () => Promise<T>): Promise<T> {
    const cacheKey = `${this.prefix}${kind}:${key}`
    const cached = await this.#timed(() => this.redis.get(cacheKey))
    if (cached !== undefined && cached !== null) {
      this.#hits++
      this.#reads.record(0)
      return JSON.parse(cached) as T
    }
    this.#misses++
    this.#reads.record(0, true)
    const value = await load()
    // Not awaited: the caller has its answer whether or not Redis takes the copy.
    this.#timed(() => this.redis.set(cacheKey, JSON.stringify(value), 'EX', CACHE_TTL_SECONDS[kind]))
    return value
  }

  async invalidate (kind: CacheKind, key: string): Promise<void> {
    await this.#timed(() => this.redis.del(`${this.prefix}${kind}:${key}`))
  }

  stats (): ServicesCacheStats {
    const reads = this.#hits + this.#misses
    const latency = this.#latency.summary()
    return {
      hits: this.#hits,
      misses: this.#misses,
      errors: this.#errors,
      hitRate: percentOf(this.#hits, reads),
      latency: { averageMs: roundOrNull(latency.average), p95Ms: roundOrNull(latency.p95) }
    }
  }

  /** The reads of the last 5 minutes, and the percent of them served from the cache (null when there were none). */
  recentReads (): { count: number, hitRate: number | null } {
    const { count, failureRate } = this.#reads.summary()
    return { count, hitRate: failureRate === null ? null : 100 - failureRate }
  }

  /** Commands Redis answered within the last 5 minutes, which the latency is of. */
  recentCommands (): number {
    return this.#latency.count()
  }

  async memory (): Promise<RedisMemory> {
    const [info, keys] = await Promise.all([this.redis.info('memory'), this.redis.dbsize()])
    const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0)
    const usedBytes = field('used_memory')
    const maxBytes = field('maxmemory') || null
    return { usedBytes, maxBytes, percent: percentOf(usedBytes, maxBytes), keys }
  }

  async #timed<T> (command: () => Promise<T>): Promise<T | undefined> {
    const started = performance.now()
    try {
      const result = await command()
      const durationMs = performance.now() - started
      this.#latency.record(durationMs)
      this.options.onCommand?.(durationMs)
      if (!this.#available) {
        this.#available = true
        this.log.info('services cache available again')
      }
      return result
    } catch (error) {
      this.#errors++
      if (this.#available) {
        this.#available = false
        this.log.warn({ err: error }, 'services cache unavailable; reads go to the upstream')
      }
      return undefined
    }
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    servicesCache: ServicesCache
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    cache: ServicesCacheStats & { recentReads: { count: number, hitRate: number | null }, recentCommands: number }
    cacheMemory: RedisMemory
  }
}

/** Redis's memory as gauges; absent while Redis does not answer. */
const CACHE_MEMORY_METRICS: Array<PartMetric<RedisMemory>> = [
  {
    name: 'portal_bff_cache_memory_used_bytes',
    help: 'Redis used_memory; absent while Redis does not answer',
    type: 'gauge',
    samples: (memory) => [{ value: memory.usedBytes }]
  },
  {
    name: 'portal_bff_cache_memory_max_bytes',
    help: 'Redis maxmemory; absent when Redis has no limit',
    type: 'gauge',
    samples: (memory) => (memory.maxBytes === null ? [] : [{ value: memory.maxBytes }])
  },
  {
    name: 'portal_bff_cache_keys',
    help: 'Keys in the Redis database',
    type: 'gauge',
    samples: (memory) => [{ value: memory.keys }]
  }
]

async function servicesCache (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, REDIS_COMMAND_TIMEOUT_MS } = fastify.config
  const onCommand = (durationMs: number) => fastify.metrics.observeCacheCommand(durationMs)
  const cache = new ServicesCache(fastify.redis, servicesCachePrefix(REDIS_KEY_PREFIX), fastify.log, { onCommand })
  fastify.decorate('servicesCache', cache)

  fastify.monitoring.register('cache', {
    description: 'the services cache',
    read: () => ({ ...cache.stats(), recentReads: cache.recentReads(), recentCommands: cache.recentCommands() }),
    measures: {
      cache_hit_rate: ({ recentReads }) => windowed(recentReads.hitRate, recentReads.count, 'cache reads'),
      cache_latency: ({ latency, recentCommands }) => windowed(latency.p95Ms, recentCommands, 'cache commands')
    },
    metrics: [
      {
        name: 'portal_bff_cache_reads_total',
        help: 'Services cache reads by result (a Redis failure is a miss)',
        type: 'counter',
        samples: ({ hits, misses }) => [
          { labels: { result: 'hit' }, value: hits },
          { labels: { result: 'miss' }, value: misses }
        ]
      },
      {
        name: 'portal_bff_cache_errors_total',
        help: 'Services cache commands Redis did not answer',
        type: 'counter',
        samples: ({ errors }) => [{ value: errors }]
      }
    ]
  })
  fastify.monitoring.register('cacheMemory', {
    description: 'Redis',
    read: () => abortable(cache.memory(), AbortSignal.timeout(REDIS_COMMAND_TIMEOUT_MS)),
    measures: {
      cache_memory: (memory) => memory.maxBytes === null
        ? { value: null, note: 'Redis has no maxmemory limit: there is no limit to judge memory against' }
        : { value: (100 * memory.usedBytes) / memory.maxBytes }
    },
    metrics: CACHE_MEMORY_METRICS
  })
}

export default fp(servicesCache, {
  name: 'services-cache',
  fastify: '5.x',
  dependencies: ['redis', 'monitoring'],
  decorators: { fastify: ['config'] }
})

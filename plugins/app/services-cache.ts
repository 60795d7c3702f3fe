import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { LatencyWindow } from '../../lib/latency-window.js'
import { SlidingWindow } from '../../lib/sliding-window.js'

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

interface Log {
  warn (object: object, message: string): void
  info (message: string): void
}

export interface ServicesCacheOptions {
  /** Told of the duration of every command Redis answered (the metrics histogram). */
  onCommand?: (durationMs: number) => void
}

function round (value: number | null, digits = 2): number | null {
  return value === null ? null : Number(value.toFixed(digits))
}

/**
 * Cache-aside for upstream reads. Redis failing never fails a read: it counts as a miss and the
 * value comes from the upstream (seed §7).
 */
export class ServicesCache {
  #hits = 0
  #misses = 0
  #errors = 0
  #available = true
  readonly #latency = new LatencyWindow()
  /** Reads over the recent window, a miss flagged as failed: the hit rate that alerts judge. */
  readonly #reads = new SlidingWindow()

  constructor (private readonly redis: Redis, private readonly prefix: string, private readonly log: Log, private readonly options: ServicesCacheOptions = {}) {}

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
    return {
      hits: this.#hits,
      misses: this.#misses,
      errors: this.#errors,
      hitRate: reads === 0 ? null : round((100 * this.#hits) / reads),
      latency: { averageMs: round(this.#latency.average()), p95Ms: round(this.#latency.percentile(95)) }
    }
  }

  /** Percent of the reads of the last 5 minutes served from the cache; null when there were none. */
  recentHitRate (): number | null {
    const { failureRate } = this.#reads.summary()
    return failureRate === null ? null : 100 - failureRate
  }

  async memory (): Promise<RedisMemory> {
    const [info, keys] = await Promise.all([this.redis.info('memory'), this.redis.dbsize()])
    const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0)
    const usedBytes = field('used_memory')
    const maxBytes = field('maxmemory') || null
    return { usedBytes, maxBytes, percent: maxBytes === null ? null : round((100 * usedBytes) / maxBytes), keys }
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

async function servicesCache (fastify: FastifyInstance) {
  const onCommand = (durationMs: number) => fastify.metrics.observeCacheCommand(durationMs)
  fastify.decorate('servicesCache', new ServicesCache(fastify.redis, `${fastify.config.REDIS_KEY_PREFIX}services-cache:`, fastify.log, { onCommand }))
}

export default fp(servicesCache, { name: 'services-cache', fastify: '5.x', dependencies: ['redis', 'metrics'], decorators: { fastify: ['config'] } })

import type { Redis } from 'ioredis'
import { percentOf } from '../../lib/numbers.js'
import type { UpstreamLogger } from '../upstream.js'

/** The org's API request count over Salesforce's rolling 24 hours, and its limit. */
export interface ApiUsage {
  used: number
  limit: number
}

export type LimitSource = 'crm' | 'configured' | 'unknown'

export interface DailyUsage {
  /** Null until the CRM has answered a call of any instance. */
  used: number | null
  limit: number | null
  limitSource: LimitSource
  /** When the figures were last reported by the CRM (ISO 8601), null before. */
  reportedAt: string | null
}

/** The CRM's daily API usage as the health endpoints report it: `used` counts against `limit`. */
export interface CrmUsageReport {
  used: number
  limit: number | null
  percent: number | null
  limitSource: LimitSource
}

/** The usage as the reports give it: none counted is 0, and its percentage of the limit. */
export function usageReport ({ used, limit, limitSource }: DailyUsage): CrmUsageReport {
  return { used: used ?? 0, limit, percent: percentOf(used ?? 0, limit), limitSource }
}

export interface DailyUsageStoreOptions {
  /** Should fail fast while Redis is unreachable (a command timeout, or no offline queue). */
  redis: Redis
  /** The hash, e.g. `crm:daily-usage` under the service's key prefix. */
  key: string
  /** CRM_DAILY_API_LIMIT: reported until the CRM has reported its own limit. */
  fallbackLimit?: number
  log?: UpstreamLogger
}

interface Reported extends ApiUsage {
  reportedAt: number
}

function count (value: string | undefined): number | undefined {
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : undefined
}

/**
 * The CRM's daily API usage, shared by every instance through one Redis hash (`key`) with the fields `used`,
 * `limit` and `reportedAt` (epoch ms).
 *
 * The last figure reported wins, even when it is lower: Salesforce counts over a rolling 24 hours, so
 * the count falls as old calls age out, and a figure that lost a race is at most one call behind until
 * the next answer. While Redis is unreachable the figures this instance last saw are kept and reported.
 */
export class DailyUsageStore {
  readonly key: string
  readonly #redis: Redis
  readonly #fallbackLimit: number | undefined
  readonly #log: UpstreamLogger | undefined
  #last: Reported | undefined
  #redisFailing = false

  constructor (options: DailyUsageStoreOptions) {
    this.key = options.key
    this.#redis = options.redis
    this.#fallbackLimit = options.fallbackLimit
    this.#log = options.log
  }

  /**
   * Never throws: a figure that cannot be stored is still kept in memory. The write is not awaited, so
   * a slow Redis never slows a CRM call; a read() after it goes down the same connection, after it.
   */
  record ({ used, limit }: ApiUsage): void {
    const reported: Reported = { used, limit, reportedAt: Date.now() }
    this.#remember(reported)
    this.#redis.hset(this.key, reported).then(
      () => {
        this.#redisFailing = false
      },
      (error: unknown) => this.#failed('store', error)
    )
  }

  async read (): Promise<DailyUsage> {
    try {
      const stored = await this.#redis.hgetall(this.key)
      const [used, limit, reportedAt] = [count(stored.used), count(stored.limit), count(stored.reportedAt)]
      if (used !== undefined && limit !== undefined && reportedAt !== undefined) {
        this.#remember({ used, limit, reportedAt })
      }
      this.#redisFailing = false
    } catch (error) {
      this.#failed('read', error)
    }
    const last = this.#last
    if (last !== undefined) {
      return {
        used: last.used,
        limit: last.limit,
        limitSource: 'crm',
        reportedAt: new Date(last.reportedAt).toISOString()
      }
    }
    const limit = this.#fallbackLimit ?? null
    return { used: null, limit, limitSource: limit === null ? 'unknown' : 'configured', reportedAt: null }
  }

  #remember (reported: Reported): void {
    if (this.#last === undefined || reported.reportedAt >= this.#last.reportedAt) this.#last = reported
  }

  #failed (doing: 'store' | 'read', error: unknown): void {
    // Once per outage at warn, so that a Redis outage does not add a line to every CRM call.
    const details = { upstream: 'crm', key: this.key, code: (error as { code?: unknown }).code }
    if (this.#redisFailing) {
      this.#log?.debug(details, `could not ${doing} the CRM daily usage in Redis`)
    } else {
      this.#redisFailing = true
      this.#log?.warn(details, `could not ${doing} the CRM daily usage in Redis; using the figures this instance last saw`)
    }
  }
}

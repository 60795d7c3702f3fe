import type { Redis } from 'ioredis'

export interface FailureLimiterOptions {
  /** Prefix of the counters' keys. */
  keyPrefix: string
  /** Failures a key may have in a window; past them it is limited until the window ends. */
  max: number
  windowMs: number
}

/** Whether a key is limited, and for how long still. */
export interface Limit {
  limited: boolean
  retryAfterSeconds: number
}

// One round trip: count the failure, start the window on the first one, and read its remaining time.
const COUNT_FAILURE = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return { count, redis.call('PTTL', KEYS[1]) }`

/**
 * Failures counted per key in Redis over a fixed window, so that every instance sees the same
 * count: sign-in failures per account, token failures per client address.
 */
export class FailureLimiter {
  constructor (private readonly redis: Redis, private readonly options: FailureLimiterOptions) {}

  /** The key's limit now, without counting anything. */
  async check (key: string): Promise<Limit> {
    const [count, ttl] = await this.redis.multi().get(this.#key(key)).pttl(this.#key(key)).exec() ?? []
    return this.#limit(Number(count?.[1] ?? 0), Number(ttl?.[1] ?? 0), this.options.max)
  }

  /** Counts a failure; the answer says whether the key is now past its limit. */
  async fail (key: string): Promise<Limit> {
    const [count, ttl] = (await this.redis.eval(COUNT_FAILURE, 1, this.#key(key), String(this.options.windowMs))) as [
      number,
      number
    ]
    return this.#limit(count, ttl, this.options.max + 1)
  }

  async reset (key: string): Promise<void> {
    await this.redis.del(this.#key(key))
  }

  #limit (count: number, ttlMs: number, limitedFrom: number): Limit {
    const limited = count >= limitedFrom
    return { limited, retryAfterSeconds: limited ? Math.max(1, Math.ceil(ttlMs / 1000)) : 0 }
  }

  #key (key: string): string {
    return `${this.options.keyPrefix}${key}`
  }
}

import type { Redis } from 'ioredis'

// Takes the lease when nobody holds it, with a fencing token above every one given before: one
// more than the last, and at least Redis's clock in milliseconds, so that a Redis that comes back
// empty still gives tokens above those PostgreSQL's mirror of the replay position has seen. A lease
// held in this instance's own name is taken again, with a new token: it is an acquisition whose
// answer never came back (the command timed out, Redis ran it later), which would otherwise keep
// every instance out until it expired.
const ACQUIRE_LEASE = `
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. '#' then return false end
local now = redis.call('TIME')
local last = tonumber(redis.call('GET', KEYS[2])) or 0
local token = string.format('%.0f', math.max(last + 1, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)))
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[1] .. '#' .. token, 'PX', ARGV[2])
return token`

// Renews the lease only while this instance holds it: 1, or 2 when a resubscription was asked for
// (KEYS[2]), which the holder serves once (the key stays, marked served, until its period ends).
const RENEW_LEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('GET', KEYS[2]) == 'requested' then
  redis.call('SET', KEYS[2], 'served', 'KEEPTTL')
  return 2
end
return 1`

const RELEASE_LEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

export interface SubscriptionLeaseOptions {
  redis: Redis
  keys: { lease: string, fence: string, resubscribe: string }
  /** This instance, as the lease names it. */
  instance: string
  ttlMs: number
}

/** What a renewal found: the lease lost, kept, or kept with a resubscription asked for. */
export type Renewal = 'lost' | 'renewed' | 'resubscribe'

/**
 * The subscription's lease in Redis: held by one instance at a time, each acquisition with a
 * fencing token (`fence`) that the replay position's writes are checked against, so that a holder
 * that lost the lease without noticing (paused) cannot write after another began.
 */
export class SubscriptionLease {
  /** The lease's value while this instance holds it: the instance and its token. */
  #value: string | undefined

  constructor (private readonly options: SubscriptionLeaseOptions) {}

  /** The fencing token of this instance's lease; null when nobody holds it, or another does. */
  async acquire (): Promise<string | null> {
    const { redis, keys, instance, ttlMs } = this.options
    const token = await redis.eval(ACQUIRE_LEASE, 2, keys.lease, keys.fence, instance, String(ttlMs)) as string | null
    this.#value = token === null ? undefined : `${instance}#${token}`
    return token
  }

  async renew (): Promise<Renewal> {
    const { redis, keys, ttlMs } = this.options
    if (this.#value === undefined) return 'lost'
    const renewed = await redis.eval(RENEW_LEASE, 2, keys.lease, keys.resubscribe, this.#value, String(ttlMs))
    if (renewed === 0) this.#value = undefined
    return renewed === 2 ? 'resubscribe' : renewed === 1 ? 'renewed' : 'lost'
  }

  /**
   * Lets the lease go at once, if it is still this instance's, so that another takes over without waiting for
   * it to expire.
   */
  async release (): Promise<void> {
    const value = this.#value
    this.#value = undefined
    if (value !== undefined) await this.options.redis.eval(RELEASE_LEASE, 1, this.options.keys.lease, value)
  }
}

import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import type { ReplayPositions } from './replay-positions.js'

// Moves the stored replay position forward only: a late or repeated batch never rewinds it.
const ADVANCE_REPLAY = `
local current = tonumber(redis.call('GET', KEYS[1]))
if current == nil or tonumber(ARGV[1]) > current then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
return 0`

// The same, for the holder of fencing token ARGV[2] only (-1 once another instance took the lease
// after it, KEYS[2] holding the last token given).
const ADVANCE_REPLAY_FENCED = `
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
local current = tonumber(redis.call('GET', KEYS[1]))
if current == nil or tonumber(ARGV[1]) > current then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
return 0`

// Forgets the position and its floor, for the holder of fencing token ARGV[1] only.
const FORGET_FENCED = `
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1`

/** Another instance took the lease after this one's token was given: the replay position is not written. */
export class LeaseLost extends Error {
  constructor (channel: string) {
    super(`the subscription lease of ${channel} went to another instance: this one's fencing token no longer writes the replay position`)
    this.name = 'LeaseLost'
  }
}

// How long the CRM retains platform events: past it, a floor names events that are gone anyway.
const RETENTION_MS = 72 * 3600 * 1000

export interface SubscriptionReplayOptions {
  channel: string
  /** CRM_EVENTS_REPLAY: where a subscription with no stored position starts. */
  replay: 'ALL' | 'LATEST' | undefined
  redis: Redis
  /** `fence`: the last fencing token given with the lease. */
  keys: { replay: string, floor: string, fence: string }
  /** The replay position's copy that outlives Redis. */
  positions: Pick<ReplayPositions, 'read' | 'advance' | 'forget'>
  /** Durably hands one event over (stored order, queued job); the replay position moves past it only after. */
  handOff: (event: PlatformEventMessage) => Promise<void>
  /** Events of a batch handed off at once (each reads its order from the CRM). */
  handOffConcurrency: number
  log: FastifyBaseLogger
}

/**
 * Where each subscription of a channel starts, and the position it moves past each batch handed off:
 * kept in Redis, mirrored in PostgreSQL, with a floor for a batch refused before any position was stored.
 */
export class SubscriptionReplay {
  /**
   * A floor that Redis could not take when its batch was refused (Redis was the cause, say): kept
   * here and stored once Redis answers, before this instance resubscribes. Another instance taking
   * over meanwhile does not know it.
   */
  #unstoredFloor: number | undefined
  #skipBelow: number | undefined
  #replayAll = false
  #fallbacks = 0
  /** The fencing token of the lease this instance holds; undefined while it holds none. */
  #token: string | undefined

  constructor (private readonly options: SubscriptionReplayOptions) {}

  /** Times the CRM no longer retained the stored position, so a subscription started from the fallback. */
  get fallbacks (): number {
    return this.#fallbacks
  }

  /** Where a subscription starts when the CRM no longer retains the stored position. */
  get fallbackReplay (): -1 | -2 {
    return this.options.replay === 'ALL' ? -2 : -1
  }

  /** The fencing token of the lease now held (undefined: none), which every write of the position carries. */
  holding (token: string | undefined): void {
    this.#token = token
  }

  /** The next subscription replays every retained event when no position is stored. */
  replayAllNext (): void {
    this.#replayAll = true
  }

  /** The replayId the next subscription starts from. */
  async from (): Promise<number> {
    const { redis, keys, replay } = this.options
    let [stored, floor] = await redis.mget(keys.replay, keys.floor)
    // A floor is the first event this stream did not hand off: below it all was, whatever
    // PostgreSQL mirrors. Without either, Redis may have lost the position.
    if (stored === null && floor === null) {
      if (this.#unstoredFloor === undefined) {
        stored = await this.#restorePosition()
      } else {
        floor = String(this.#unstoredFloor)
        await redis.set(keys.floor, floor, 'PX', RETENTION_MS, 'NX')
      }
    }
    this.#unstoredFloor = undefined
    // The heal's subscription with nothing stored: -1 would skip the very events it is for. A
    // floor below every event replays all retained ones (-2), here and after a takeover.
    if (stored === null && floor === null && this.#replayAll) {
      floor = '0'
      await redis.set(keys.floor, floor, 'PX', RETENTION_MS, 'NX')
    }
    this.#replayAll = false
    this.#skipBelow = stored === null && floor !== null ? Number(floor) : undefined
    if (stored !== null) return Number(stored)
    return replay === 'ALL' || this.#skipBelow !== undefined ? -2 : -1
  }

  /** The stored position is no longer valid: forget it, so the fallback's positions can be stored. */
  async forget (): Promise<void> {
    const { redis, keys, positions, channel } = this.options
    this.#fallbacks++
    this.#unstoredFloor = undefined
    const token = this.#fencingToken()
    if ((await redis.eval(FORGET_FENCED, 3, keys.replay, keys.floor, keys.fence, token)) === -1) {
      throw new LeaseLost(channel)
    }
    await positions.forget(channel, token)
  }

  /** Hands a batch off, moving the position past each part of it once that part is handed off. */
  async handOff (events: PlatformEventMessage[]): Promise<void> {
    const { redis, keys, positions, channel, handOff, handOffConcurrency } = this.options
    const skipBelow = this.#skipBelow
    const wanted = skipBelow === undefined ? events : events.filter((event) => event.data.event.replayId >= skipBelow)
    // A chunk of events at a time, handed off together: one by one, a batch would take a CRM
    // round trip per event, whatever the CRM queue's concurrency. The position moves past a
    // chunk once all of it is handed off; a crash mid-chunk repeats the chunk, and hand-off is
    // idempotent (the order is stored once, its job id is the CRM order id).
    for (let start = 0; start < wanted.length; start += handOffConcurrency) {
      const chunk = wanted.slice(start, start + handOffConcurrency)
      try {
        await Promise.all(chunk.map(handOff))
      } catch (error) {
        // Only the first refusal sets it (NX), and it counts only while no position is stored.
        const floor = chunk[0]!.data.event.replayId
        await redis.set(keys.floor, String(floor), 'PX', RETENTION_MS, 'NX').catch(() => {
          this.#unstoredFloor ??= floor
        })
        throw error
      }
      const lastReplayId = Math.max(...chunk.map((event) => event.data.event.replayId))
      // Redis says whether this instance still holds the lease, then PostgreSQL's mirror checks the
      // token too: a write that was late past the check still never follows the next holder's.
      const token = this.#fencingToken()
      if ((await redis.eval(ADVANCE_REPLAY_FENCED, 2, keys.replay, keys.fence, String(lastReplayId), token)) === -1) {
        throw new LeaseLost(channel)
      }
      await positions.advance(channel, lastReplayId, token)
    }
  }

  #fencingToken (): string {
    if (this.#token === undefined) throw new LeaseLost(this.options.channel)
    return this.#token
  }

  /** The position PostgreSQL mirrors, put back into a Redis that lost it; null when none was ever stored. */
  async #restorePosition (): Promise<string | null> {
    const { positions, redis, keys, channel, log } = this.options
    const mirrored = await positions.read(channel)
    if (mirrored === null) return null
    await redis.eval(ADVANCE_REPLAY, 1, keys.replay, String(mirrored))
    log.warn(
      { channel, replayId: mirrored },
      'platform events: Redis holds no replay position (restarted empty or failed over); resuming from the one PostgreSQL mirrors'
    )
    return String(mirrored)
  }
}

import { hostname } from 'node:os'
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { PlatformEventSubscriber, type SubscriberState, type SubscriberStats } from '../../../integrations/crm/bayeux.js'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import type { CrmClient } from '../../../integrations/crm/client.js'
import type { QueueHealth } from '../monitoring/levels.js'
import type { ReplayPositions } from './replay-positions.js'
import { subscriptionKeys } from '../redis-keys.js'

export const ORDER_PROVISION_CHANNEL = '/event/OrderProvisionRequested__e'

export const SUBSCRIPTION_STATES = ['disabled', 'standby', 'connecting', 'connected', 'failed'] as const
export type SubscriptionState = typeof SUBSCRIPTION_STATES[number]

/** The stream's own figures (SubscriberStats), with this instance's part in the subscription as its state. */
export interface SubscriptionStats extends Omit<SubscriberStats, 'state'> {
  state: SubscriptionState
  /** Times the CRM no longer retained the stored replay position, so the subscription fell back to new (or all retained) events. */
  replayFallbacks: number
}

/** The figures of a subscription with no stream running. */
const NO_STREAM: Omit<SubscriberStats, 'state'> = { lastEventAt: null, replayId: null, received: 0, reconnects: 0, dropped: 0, replaySupported: null, lastError: null }

/** What the lease holder last said of its subscription, shared with every instance through Redis. */
export interface HolderReport extends SubscriptionStats {
  instance: string
  reportedAt: string
}

/** The subscription's `health`: a queue's values, and `disabled` when CRM_EVENTS_ENABLED is not `true`. */
export type SubscriptionHealth = QueueHealth | 'disabled'

/**
 * The subscription's health across instances, judged on the lease holder's report: unhealthy while
 * no instance holds a connected subscription (orders wait in Pending Review); degraded while the
 * CRM did not grant the replay extension (events published during a disconnection are lost).
 * A disabled subscription says so: it receives nothing, which is not healthy.
 */
export function subscriptionHealth (enabled: boolean, holder: HolderReport | null): SubscriptionHealth {
  if (!enabled) return 'disabled'
  if (holder?.state !== 'connected') return 'unhealthy'
  return holder.replaySupported === false ? 'degraded' : 'healthy'
}

/**
 * The holder's state as one instance sees it: `disabled` here, `none` when Redis says no instance
 * holds the lease, the holder's own report, `stale` once that report is older than two renewals
 * (the holder stopped reporting, or Redis cannot be read), then `unknown` past a takeover's time.
 */
export const HOLDER_STATES = ['none', ...SUBSCRIPTION_STATES, 'stale', 'unknown'] as const
export type HolderState = typeof HOLDER_STATES[number]

export interface HolderView {
  state: HolderState
  /** Seconds since what `state` says was last confirmed: by the settings, by Redis, or by the holder's report. */
  ageSeconds: number
}

export interface EventSubscriptionOptions {
  enabled: boolean
  replay: 'ALL' | 'LATEST' | undefined
  redis: Redis
  /** The replay position's copy that outlives Redis. */
  positions: Pick<ReplayPositions, 'read' | 'advance' | 'forget'>
  keyPrefix: string
  crm: CrmClient
  apiVersion: string
  leaseTtlMs: number
  connectTimeoutMarginMs: number
  /** Durably hands one event over (stored order, queued job); the replay position moves past it only after. */
  handOff: (event: PlatformEventMessage) => Promise<void>
  /** Events of a batch handed off at once (each reads its order from the CRM). */
  handOffConcurrency: number
  /** This instance, the holder, subscribed again as another instance (or itself) asked. */
  onResubscribe?: () => void
  log: FastifyBaseLogger
  backoff?: { initialMs?: number, maxMs?: number }
}

// Moves the stored replay position forward only: a late or repeated batch never rewinds it.
const ADVANCE_REPLAY = `
local current = tonumber(redis.call('GET', KEYS[1]))
if current == nil or tonumber(ARGV[1]) > current then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
return 0`

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

// How long the CRM retains platform events: past it, a floor names events that are gone anyway.
const RETENTION_MS = 72 * 3600 * 1000

function localState (state: SubscriberState): SubscriptionState {
  return state === 'connected' ? 'connected' : state === 'failed' ? 'failed' : 'connecting'
}

/**
 * The platform-event subscription, held by at most one instance at a time through a Redis lease
 * that the holder renews; another takes over within the lease time (plus one renewal period) of
 * the holder's death. The replay position lives in Redis, mirrored in PostgreSQL, and moves only
 * after a batch is handed off.
 */
export class EventSubscription {
  readonly instance = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
  readonly replayKey: string
  /**
   * The first event of a batch refused before any position was stored. Resubscribing from -1 would
   * skip that batch, and replay IDs must not be computed, so the subscription replays every retained
   * event (-2) and ignores those below the floor: the ones from before it started, as -1 meant.
   */
  readonly floorKey: string
  /**
   * A floor that Redis could not take when its batch was refused (Redis was the cause, say): kept
   * here and stored once Redis answers, before this instance resubscribes. Another instance taking
   * over meanwhile does not know it.
   */
  #unstoredFloor: number | undefined
  #skipBelow: number | undefined
  /** The next subscription replays every retained event when no position is stored. */
  #replayAll = false
  #replayFallbacks = 0
  readonly #leaseKey: string
  readonly #stateKey: string
  /** A resubscription asked for by any instance: `requested`, then `served` by the holder, until the period ends. */
  readonly #resubscribeKey: string
  #state: SubscriptionState
  #subscriber: PlatformEventSubscriber | undefined
  #timer: NodeJS.Timeout | undefined
  #ticking: Promise<void> | undefined
  /** The holder as Redis last told it (null: no holder), and when: what is left to say while Redis cannot be read. */
  #lastSeen: { report: HolderReport | null, at: number } | undefined

  constructor (private readonly options: EventSubscriptionOptions) {
    const keys = subscriptionKeys(options.keyPrefix, ORDER_PROVISION_CHANNEL)
    this.replayKey = keys.replay
    this.floorKey = keys.floor
    this.#leaseKey = keys.lease
    this.#stateKey = keys.state
    this.#resubscribeKey = keys.resubscribe
    this.#state = options.enabled ? 'standby' : 'disabled'
  }

  get renewEveryMs (): number {
    return Math.max(250, Math.floor(this.options.leaseTtlMs / 3))
  }

  get enabled (): boolean {
    return this.options.enabled
  }

  start (): void {
    if (!this.options.enabled) return
    const tick = () => {
      this.#ticking = this.#tick().finally(() => { this.#ticking = undefined })
    }
    tick()
    this.#timer = setInterval(tick, this.renewEveryMs)
  }

  async stop (): Promise<void> {
    clearInterval(this.#timer)
    await this.#ticking
    if (this.#subscriber !== undefined) {
      await this.#release()
    }
  }

  /**
   * Subscribes again from the stored replay position (every retained event when none is stored),
   * when this instance holds the subscription: events delivered while the old one looked connected
   * but received nothing are replayed, harmlessly, since the job id is the CRM order id.
   */
  async resubscribe (): Promise<boolean> {
    if (this.#subscriber === undefined) return false
    this.#replayAll = true
    await this.#stopSubscriber('connecting')
    this.#startSubscriber()
    return true
  }

  /**
   * Asks the holder, whichever instance it is, to subscribe again (`resubscribe`) at its next lease
   * renewal, at most once a `periodMs` across every instance. False when no instance holds a
   * connected subscription (one connecting subscribes from the stored position anyway), or when a
   * resubscription was asked for within the period.
   */
  async requestResubscribe (periodMs: number): Promise<boolean> {
    if ((await this.holder())?.state !== 'connected') return false
    return await this.options.redis.set(this.#resubscribeKey, 'requested', 'PX', periodMs, 'NX') === 'OK'
  }

  stats (): SubscriptionStats {
    const { state: _streamState, ...stream } = this.#subscriber?.stats() ?? { ...NO_STREAM, state: undefined }
    return { ...stream, state: this.#state, replayFallbacks: this.#replayFallbacks }
  }

  /** The holder's last report, whichever instance holds the lease; null when none reports. */
  async holder (): Promise<HolderReport | null> {
    const stored = await this.options.redis.get(this.#stateKey)
    const report = stored === null ? null : JSON.parse(stored) as HolderReport
    this.#lastSeen = { report, at: Date.now() }
    return report
  }

  /**
   * The holder's state and its age, never failing: with Redis unreadable, the last report read ages
   * into `stale`, then `unknown`; this instance's own word replaces its report when it was the holder.
   */
  async holderView (): Promise<HolderView> {
    if (!this.options.enabled) return { state: 'disabled', ageSeconds: 0 }
    const now = Date.now()
    let report: HolderReport | null
    let confirmedAt: number
    try {
      report = await this.holder()
      confirmedAt = now
    } catch {
      // Only the holder leaves standby: its own word, whatever report it could read before.
      if (this.#state !== 'standby') return { state: this.#state, ageSeconds: 0 }
      report = this.#lastSeen?.report ?? null
      confirmedAt = this.#lastSeen?.at ?? 0
    }
    if (report?.instance === this.instance && this.#state !== 'standby') return { state: this.#state, ageSeconds: 0 }
    if (report !== null) confirmedAt = Math.min(confirmedAt, Date.parse(report.reportedAt))
    const ageMs = Math.max(0, now - confirmedAt)
    const state: HolderState = ageMs > this.options.leaseTtlMs + this.renewEveryMs
      ? 'unknown'
      : ageMs > 2 * this.renewEveryMs ? 'stale' : report?.state ?? 'none'
    return { state, ageSeconds: ageMs / 1000 }
  }

  async #tick (): Promise<void> {
    const { redis, leaseTtlMs, log } = this.options
    try {
      if (this.#subscriber !== undefined) {
        const renewed = await redis.eval(RENEW_LEASE, 2, this.#leaseKey, this.#resubscribeKey, this.instance, String(leaseTtlMs))
        if (renewed === 2) {
          log.warn({ channel: ORDER_PROVISION_CHANNEL }, 'platform events: the CRM approved orders that this connected subscription did not deliver; subscribing again from the stored replay position (every retained event when none is stored)')
          await this.resubscribe()
          this.options.onResubscribe?.()
        }
        if (renewed !== 0) {
          await this.#report()
          return
        }
        log.warn({ instance: this.instance }, 'platform-event subscription lease lost: another instance holds it, or Redis lost it with its data; standing by')
        await this.#stopSubscriber('standby')
        return
      }
      const acquired = await redis.set(this.#leaseKey, this.instance, 'PX', leaseTtlMs, 'NX')
      if (acquired === 'OK') {
        log.info({ instance: this.instance }, 'platform-event subscription lease acquired: subscribing')
        this.#startSubscriber()
        await this.#report()
      }
    } catch (error) {
      // Without Redis there is no lease, no replay position and no job queue: stand by until it returns.
      if (this.#subscriber !== undefined) {
        log.error({ err: error }, 'platform-event subscription stopped: Redis unavailable, the lease cannot be renewed')
        await this.#stopSubscriber('failed')
      }
    }
  }

  #startSubscriber (): void {
    const { crm, apiVersion, replay, redis, positions, log, handOff, handOffConcurrency, connectTimeoutMarginMs, backoff } = this.options
    this.#state = 'connecting'
    const subscriber = new PlatformEventSubscriber({
      crm,
      apiVersion,
      channel: ORDER_PROVISION_CHANNEL,
      replayFrom: async () => {
        let [stored, floor] = await redis.mget(this.replayKey, this.floorKey)
        // A floor is the first event this stream did not hand off: below it all was, whatever
        // PostgreSQL mirrors. Without either, Redis may have lost the position.
        if (stored === null && floor === null) {
          if (this.#unstoredFloor === undefined) {
            stored = await this.#restorePosition()
          } else {
            floor = String(this.#unstoredFloor)
            await redis.set(this.floorKey, floor, 'PX', RETENTION_MS, 'NX')
          }
        }
        this.#unstoredFloor = undefined
        // The heal's subscription with nothing stored: -1 would skip the very events it is for. A
        // floor below every event replays all retained ones (-2), here and after a takeover.
        if (stored === null && floor === null && this.#replayAll) {
          floor = '0'
          await redis.set(this.floorKey, floor, 'PX', RETENTION_MS, 'NX')
        }
        this.#replayAll = false
        this.#skipBelow = stored === null && floor !== null ? Number(floor) : undefined
        if (stored !== null) return Number(stored)
        return replay === 'ALL' || this.#skipBelow !== undefined ? -2 : -1
      },
      fallbackReplay: replay === 'ALL' ? -2 : -1,
      // The stored position is no longer valid: forget it, so the fallback's positions can be stored.
      onInvalidReplay: async () => {
        this.#replayFallbacks++
        this.#unstoredFloor = undefined
        await Promise.all([redis.del(this.replayKey, this.floorKey), positions.forget(ORDER_PROVISION_CHANNEL)])
      },
      onEvents: async (events) => {
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
            await redis.set(this.floorKey, String(floor), 'PX', RETENTION_MS, 'NX').catch(() => { this.#unstoredFloor ??= floor })
            throw error
          }
          const lastReplayId = Math.max(...chunk.map((event) => event.data.event.replayId))
          await Promise.all([
            redis.eval(ADVANCE_REPLAY, 1, this.replayKey, String(lastReplayId)),
            positions.advance(ORDER_PROVISION_CHANNEL, lastReplayId)
          ])
        }
        this.#report().catch(() => {})
      },
      onState: (state, details) => {
        if (this.#subscriber !== subscriber || state === 'stopped' || state === 'idle') return
        const next = localState(state)
        if (next === this.#state) return
        this.#state = next
        if (next === 'connected') log.info({ channel: ORDER_PROVISION_CHANNEL }, 'platform-event subscription connected')
        else if (next === 'failed') log.error({ channel: ORDER_PROVISION_CHANNEL, lastError: details.lastError, retryInMs: details.retryInMs }, 'platform-event subscription interrupted; reconnecting')
        this.#report().catch(() => {})
      },
      log,
      connectTimeoutMarginMs,
      backoff
    })
    this.#subscriber = subscriber
    subscriber.start().catch(() => {})
  }

  /** The position PostgreSQL mirrors, put back into a Redis that lost it; null when none was ever stored. */
  async #restorePosition (): Promise<string | null> {
    const { positions, redis, log } = this.options
    const mirrored = await positions.read(ORDER_PROVISION_CHANNEL)
    if (mirrored === null) return null
    await redis.eval(ADVANCE_REPLAY, 1, this.replayKey, String(mirrored))
    log.warn({ channel: ORDER_PROVISION_CHANNEL, replayId: mirrored }, 'platform events: Redis holds no replay position (restarted empty or failed over); resuming from the one PostgreSQL mirrors')
    return String(mirrored)
  }

  async #stopSubscriber (state: SubscriptionState): Promise<void> {
    const subscriber = this.#subscriber
    this.#subscriber = undefined
    this.#state = state
    await subscriber?.stop()
  }

  async #release (): Promise<void> {
    await this.#stopSubscriber('standby')
    const { redis } = this.options
    await Promise.all([
      redis.eval(RELEASE_LEASE, 1, this.#leaseKey, this.instance),
      redis.del(this.#stateKey)
    ]).catch(() => {})
  }

  async #report (): Promise<void> {
    const report: HolderReport = { ...this.stats(), instance: this.instance, reportedAt: new Date().toISOString() }
    await this.options.redis.set(this.#stateKey, JSON.stringify(report), 'PX', this.options.leaseTtlMs)
  }
}

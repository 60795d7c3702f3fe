import { hostname } from 'node:os'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  PlatformEventSubscriber, type SubscriberState, type SubscriberStats
} from '../../../integrations/crm/bayeux.js'
import {
  HolderReports, subscriptionHealth, type HolderReport, type HolderView, type SubscriptionHealth,
  type SubscriptionState, type SubscriptionStats
} from './holder-state.js'
import { LeaseLost, SubscriptionReplay } from './replay.js'
import { SubscriptionLease } from './lease.js'
import { subscriptionKeys } from '../redis-keys.js'
import type { EventSubscriptionOptions } from './subscription-options.js'

export const ORDER_PROVISION_CHANNEL = '/event/OrderProvisionRequested__e'

/** The figures of a subscription with no stream running. */
const NO_STREAM: Omit<SubscriberStats, 'state'> = {
  lastEventAt: null,
  replayId: null,
  received: 0,
  reconnects: 0,
  dropped: 0,
  replaySupported: null,
  lastError: null
}

function localState (state: SubscriberState): SubscriptionState {
  return state === 'connected' ? 'connected' : state === 'failed' ? 'failed' : 'connecting'
}

/**
 * The platform-event subscription, held by at most one instance at a time through a Redis lease
 * that the holder renews; another takes over within the lease time (plus one renewal period) of
 * the holder's death. The replay position lives in Redis, mirrored in PostgreSQL, and moves only
 * after a batch is handed off.
 */
export class PlatformEventSubscription {
  readonly instance = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
  readonly replayKey: string
  /**
   * The first event of a batch refused before any position was stored. Resubscribing from -1 would
   * skip that batch, and replay IDs must not be computed, so the subscription replays every retained
   * event (-2) and ignores those below the floor: the ones from before it started, as -1 meant.
   */
  readonly floorKey: string
  readonly #replay: SubscriptionReplay
  readonly #holders: HolderReports
  readonly #lease: SubscriptionLease
  /** A resubscription asked for by any instance: `requested`, then `served` by the holder, until the period ends. */
  readonly #resubscribeKey: string
  #state: SubscriptionState
  #subscriber: PlatformEventSubscriber | undefined
  /** The streams a resubscription replaced, until they ended: the next one starts only then. */
  #replaced: Promise<unknown> | undefined
  #stopping: AbortController | undefined
  #ticks: Promise<void> | undefined

  constructor (private readonly options: EventSubscriptionOptions) {
    const { redis, replay, positions, handOff, handOffConcurrency, leaseTtlMs, log } = options
    const keys = subscriptionKeys(options.keyPrefix, ORDER_PROVISION_CHANNEL)
    this.replayKey = keys.replay
    this.floorKey = keys.floor
    this.#lease = new SubscriptionLease({ redis, keys, instance: this.instance, ttlMs: leaseTtlMs })
    this.#resubscribeKey = keys.resubscribe
    this.#state = options.enabled ? 'standby' : 'disabled'
    this.#replay = new SubscriptionReplay({
      channel: ORDER_PROVISION_CHANNEL,
      replay,
      redis,
      keys,
      positions,
      handOff,
      handOffConcurrency,
      log
    })
    this.#holders = new HolderReports({
      redis,
      key: keys.state,
      instance: this.instance,
      leaseTtlMs,
      renewEveryMs: this.renewEveryMs
    })
  }

  /** A quarter of the lease: a renewal may take a Redis command's whole timeout and still land inside it. */
  get renewEveryMs (): number {
    return Math.max(250, Math.floor(this.options.leaseTtlMs / 4))
  }

  get enabled (): boolean {
    return this.options.enabled
  }

  start (): void {
    if (!this.options.enabled) return
    const stopping = new AbortController()
    this.#stopping = stopping
    this.#ticks = this.#tickEveryPeriod(stopping.signal)
  }

  /**
   * One tick at a time, each a period after the previous one began (at once when that one took
   * longer): two at once would race, an acquisition answered null clearing the lease another had
   * just taken. A tick waits on one Redis command only, so that renewals stay a period apart: a
   * resubscription (its old stream may take a second to end) and the holder's report go on beside.
   */
  async #tickEveryPeriod (signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const began = Date.now()
      await this.#tick()
      await sleep(Math.max(0, this.renewEveryMs - (Date.now() - began)), undefined, { signal }).catch(() => {})
    }
  }

  /**
   * Stops subscribing and lets the lease go at once: another instance takes over at its next attempt, not
   * once the lease expires.
   */
  async stop (): Promise<void> {
    this.#stopping?.abort()
    await this.#ticks
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
    const replaced = this.#subscriber
    if (replaced === undefined) return false
    this.#replay.replayAllNext()
    // The new stream takes the old one's place at once, so that the renewals go on while the old one
    // ends (up to its disconnect's bound, after a batch in hand), and starts only then: one stream at a time.
    const next = this.#newSubscriber()
    this.#subscriber = next
    this.#state = 'connecting'
    const ended = Promise.all([this.#replaced, replaced.stop()])
    this.#replaced = ended
    await ended
    // Stood down or stopped meanwhile: the lease is no longer this instance's.
    if (this.#subscriber !== next) return false
    next.start().catch(() => {})
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
    return { ...stream, state: this.#state, replayFallbacks: this.#replay.fallbacks }
  }

  /** The holder's last report, whichever instance holds the lease; null when none reports. */
  async holder (): Promise<HolderReport | null> {
    return await this.#holders.read()
  }

  /** The subscription's health across instances, judged on the holder's report (`holder()`). */
  health (holder: HolderReport | null): SubscriptionHealth {
    return subscriptionHealth(this.enabled, holder)
  }

  /** The holder's state and its age as this instance sees it, never failing. */
  async holderView (): Promise<HolderView> {
    if (!this.options.enabled) return { state: 'disabled', ageSeconds: 0 }
    return await this.#holders.view(() => this.#state)
  }

  async #tick (): Promise<void> {
    const { log } = this.options
    try {
      if (this.#subscriber !== undefined) {
        const renewal = await this.#lease.renew()
        if (renewal === 'resubscribe') {
          log.warn(
            { channel: ORDER_PROVISION_CHANNEL },
            'platform events: the CRM approved orders that this connected subscription did not deliver; subscribing again from the stored replay position (every retained event when none is stored)'
          )
          this.resubscribe().then((done) => { if (done) this.options.onResubscribe?.() }).catch(() => {})
        }
        if (renewal !== 'lost') {
          this.#report().catch(() => {})
          return
        }
        log.warn(
          { instance: this.instance },
          'platform-event subscription lease lost: another instance holds it, or Redis lost it with its data; standing by'
        )
        await this.#stopSubscriber('standby')
        return
      }
      const token = await this.#lease.acquire()
      if (token !== null) {
        log.info(
          { instance: this.instance, fencingToken: token },
          'platform-event subscription lease acquired: subscribing'
        )
        this.#replay.holding(token)
        this.#startSubscriber()
        this.#report().catch(() => {})
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
    const subscriber = this.#newSubscriber()
    this.#state = 'connecting'
    this.#subscriber = subscriber
    subscriber.start().catch(() => {})
  }

  #newSubscriber (): PlatformEventSubscriber {
    const { crm, apiVersion, log, connectTimeoutMarginMs, backoff } = this.options
    const subscriber = new PlatformEventSubscriber({
      crm,
      apiVersion,
      channel: ORDER_PROVISION_CHANNEL,
      replayFrom: () => this.#replay.from(),
      fallbackReplay: this.#replay.fallbackReplay,
      onInvalidReplay: () => this.#replay.forget(),
      onPlatformEvents: async (events) => {
        try {
          await this.#replay.handOff(events)
        } catch (error) {
          // Another instance began while this one was paused: it stops here, without waiting for its
          // next renewal (nor for this stream, which is delivering this very batch).
          if (error instanceof LeaseLost && this.#subscriber === subscriber) {
            log.warn(
              { instance: this.instance },
              'platform-event subscription: another instance took the lease, the replay position was not written; standing by'
            )
            this.#stopSubscriber('standby').catch(() => {})
          }
          throw error
        }
        this.#report().catch(() => {})
      },
      onState: (state, details) => {
        if (this.#subscriber !== subscriber || state === 'stopped' || state === 'idle') return
        const next = localState(state)
        if (next === this.#state) return
        this.#state = next
        if (next === 'connected') {
          log.info({ channel: ORDER_PROVISION_CHANNEL }, 'platform-event subscription connected')
        } else if (next === 'failed') {
          log.error(
            { channel: ORDER_PROVISION_CHANNEL, lastError: details.lastError, retryInMs: details.retryInMs },
            'platform-event subscription interrupted; reconnecting'
          )
        }
        this.#report().catch(() => {})
      },
      log,
      connectTimeoutMarginMs,
      backoff
    })
    return subscriber
  }

  async #stopSubscriber (state: SubscriptionState): Promise<void> {
    const subscriber = this.#subscriber
    this.#subscriber = undefined
    this.#state = state
    await Promise.all([subscriber?.stop(), this.#replaced])
  }

  async #release (): Promise<void> {
    await this.#stopSubscriber('standby')
    this.#replay.holding(undefined)
    await Promise.all([this.#lease.release(), this.#holders.remove()]).catch(() => {})
  }

  async #report (): Promise<void> {
    await this.#holders.write({ ...this.stats(), instance: this.instance, reportedAt: new Date().toISOString() })
  }
}

import type { Redis } from 'ioredis'
import type { SubscriberStats } from '../../../integrations/crm/bayeux.js'
import type { QueueHealth } from '../monitoring/levels.js'

export const SUBSCRIPTION_STATES = ['disabled', 'standby', 'connecting', 'connected', 'failed'] as const
export type SubscriptionState = typeof SUBSCRIPTION_STATES[number]

/** The stream's own figures (SubscriberStats), with this instance's part in the subscription as its state. */
export interface SubscriptionStats extends Omit<SubscriberStats, 'state'> {
  state: SubscriptionState
  /**
   * Times the CRM no longer retained the stored replay position, so the subscription fell back to new (or all
   * retained) events.
   */
  replayFallbacks: number
}

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

export interface HolderReportsOptions {
  redis: Redis
  /** The Redis key of the report. */
  key: string
  /** This instance, as its reports name it. */
  instance: string
  /** A report lives as long as the lease it comes with. */
  leaseTtlMs: number
  renewEveryMs: number
}

/** The lease holder's report in Redis: written by the holder at each renewal and change, read by every instance. */
export class HolderReports {
  /** The holder as Redis last told it (null: no holder), and when: what is left to say while Redis cannot be read. */
  #lastSeen: { report: HolderReport | null, at: number } | undefined

  constructor (private readonly options: HolderReportsOptions) {}

  async write (report: HolderReport): Promise<void> {
    await this.options.redis.set(this.options.key, JSON.stringify(report), 'PX', this.options.leaseTtlMs)
  }

  async remove (): Promise<void> {
    await this.options.redis.del(this.options.key)
  }

  /** The holder's last report, whichever instance holds the lease; null when none reports. */
  async read (): Promise<HolderReport | null> {
    const stored = await this.options.redis.get(this.options.key)
    const report = stored === null ? null : JSON.parse(stored) as HolderReport
    this.#lastSeen = { report, at: Date.now() }
    return report
  }

  /**
   * The holder's state and its age, never failing: with Redis unreadable, the last report read ages
   * into `stale`, then `unknown`; this instance's own word (`ownState`) replaces its report when it was the holder.
   */
  async view (ownState: () => SubscriptionState): Promise<HolderView> {
    const now = Date.now()
    let report: HolderReport | null
    let confirmedAt: number
    try {
      report = await this.read()
      confirmedAt = now
    } catch {
      // Only the holder leaves standby: its own word, whatever report it could read before.
      if (ownState() !== 'standby') return { state: ownState(), ageSeconds: 0 }
      report = this.#lastSeen?.report ?? null
      confirmedAt = this.#lastSeen?.at ?? 0
    }
    const own = ownState()
    if (report?.instance === this.options.instance && own !== 'standby') return { state: own, ageSeconds: 0 }
    if (report !== null) confirmedAt = Math.min(confirmedAt, Date.parse(report.reportedAt))
    const ageMs = Math.max(0, now - confirmedAt)
    const { leaseTtlMs, renewEveryMs } = this.options
    const state: HolderState = ageMs > leaseTtlMs + renewEveryMs
      ? 'unknown'
      : ageMs > 2 * renewEveryMs ? 'stale' : report?.state ?? 'none'
    return { state, ageSeconds: ageMs / 1000 }
  }
}

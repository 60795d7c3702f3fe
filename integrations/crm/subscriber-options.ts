// What the platform-event subscriber (bayeux.ts) is given and tells: its options, its states and its figures.
import type { CrmSession } from './client.js'
import type { StreamFailure } from './bayeux-transport.js'
import type { PlatformEventMessage } from './bayeux-protocol.js'
import type { UpstreamLogger } from '../upstream.js'

/** What the subscriber needs of the CRM client (a CrmClient fits). */
export interface CrmSessions {
  session: (signal: AbortSignal) => Promise<CrmSession>
  /** Drops a session the Streaming API refused, so that the next `session()` mints a new one. */
  invalidateSession: (refused: CrmSession) => void
}

/**
 * `connecting`: getting a session, handshaking and subscribing; `connected`: subscribed, long polling;
 * `failed`: after a failure, backing off before the next handshake.
 */
export type SubscriberState = 'idle' | 'connecting' | 'connected' | 'failed' | 'stopped'

export interface StateDetails {
  lastError: StreamFailure | null
  /** `failed`: when the next handshake is due. */
  retryInMs?: number
}

export interface SubscriberStats {
  state: SubscriberState
  /** When the last batch of events arrived (ISO 8601), null before the first. */
  lastEventAt: string | null
  /** The replayId of the last event that `onPlatformEvents` accepted. */
  replayId: number | null
  /** Events that `onPlatformEvents` accepted. */
  received: number
  /** Handshakes after the first. */
  reconnects: number
  /** Events delivered without a replayId or a payload: logged and skipped. */
  dropped: number
  /** Whether the last handshake granted the replay extension (null before one); without it nothing is replayed. */
  replaySupported: boolean | null
  /** The last failure, or the defect of the last event dropped, whichever came later. */
  lastError: StreamFailure | null
}

export interface PlatformEventSubscriberOptions {
  crm: CrmSessions
  /** e.g. `60.0`: the endpoint is `{instanceUrl}/cometd/{apiVersion}`. */
  apiVersion: string
  /** e.g. `/event/OrderProvisionRequested__e` */
  channel: string
  /** The stored replay position, or -1 (new events) / -2 (every retained event); asked before every subscribe. */
  replayFrom: () => Promise<number>
  /** Subscribes with this when the Streaming API no longer has the stored position (default -1). */
  fallbackReplay?: -1 | -2
  /** Told the stored position that was refused, before the fallback subscription. */
  onInvalidReplay?: (replayId: number) => void | Promise<void>
  /**
   * Each batch, in replayId order. The next /meta/connect waits for it; a rejection ends the session, and
   * the next one subscribes from `replayFrom()` again, so that nothing is lost.
   */
  onPlatformEvents: (events: PlatformEventMessage[]) => Promise<void>
  onState?: (state: SubscriberState, details: StateDetails) => void
  log?: UpstreamLogger
  /** Watchdog: a /meta/connect unanswered after advice.timeout plus this is abandoned (default 10 000 ms). */
  connectTimeoutMarginMs?: number
  /** Bound on a handshake or subscribe (default 10 000 ms). */
  requestTimeoutMs?: number
  /** Delay before the next handshake after a failure: full jitter up to initialMs doubling to maxMs (500, 30 000). */
  backoff?: { initialMs?: number, maxMs?: number }
  /** The jitter's source (Math.random): a test fixes it to see the backoff's bound. */
  random?: () => number
}

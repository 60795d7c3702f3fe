import type { HealthCheck } from '../../../lib/health-checks.js'
import { FAILURE_CLASSES, UpstreamFailure } from '../../../lib/errors.js'
import type { MonitoringSource } from '../monitoring/index.js'
import { HOLDER_STATES, SUBSCRIPTION_STATES, type HolderView, type SubscriptionStats } from './holder-state.js'
import type { PlatformEventSubscription } from './subscription.js'
import type { ParkedEvents } from './parked-events.js'

/** A state gauge's samples: 1 for the current state, 0 for every other, so each series always exists. */
function stateSamples (states: readonly string[], current: string) {
  return states.map((state) => ({ labels: { state }, value: state === current ? 1 : 0 }))
}

/**
 * The `events` check: fails while no instance holds a connected subscription, the specification's silent
 * outage made loud.
 */
export function platformEventsCheck (subscription: Pick<PlatformEventSubscription, 'holder'>): HealthCheck {
  return async () => {
    const holder = await subscription.holder()
    if (holder?.state === 'connected') return
    // The class of the stream's last failure (connection_refused, timeout...) when it has one.
    const failure = FAILURE_CLASSES.find((known) => known === holder?.lastError) ?? 'upstream_error'
    throw new UpstreamFailure(failure, 'crm', `platform-event subscription ${holder === null ? 'held by no instance' : holder.state}`)
  }
}

/**
 * The lease holder as this instance sees it. Every instance reports it, whatever the setting, so the
 * rules can tell "nobody holds it" from "held, not connected", and a disabled or silent subscription
 * is never invisible.
 */
export function holderPart (subscription: Pick<PlatformEventSubscription, 'holderView'>): MonitoringSource<HolderView> {
  return {
    description: 'the platform-event subscription lease holder',
    read: () => subscription.holderView(),
    metrics: [
      {
        name: 'portal_bff_event_subscription_holder_state',
        help: 'The platform-event subscription\'s lease holder as this instance sees it, 1 for the current state: none (no instance holds the lease), the holder\'s own report, stale (its report is older than two renewals), unknown (older than a takeover takes), disabled (CRM_EVENTS_ENABLED is not true here)',
        type: 'gauge',
        samples: ({ state }) => stateSamples(HOLDER_STATES, state)
      },
      {
        name: 'portal_bff_event_subscription_holder_state_age_seconds',
        help: 'Seconds since the holder state was last confirmed (by the settings, by Redis, or by the holder\'s report)',
        type: 'gauge',
        samples: ({ ageSeconds }) => [{ value: ageSeconds }]
      }
    ]
  }
}

/**
 * The parked platform events: a part of its own, so that a slow database does not take the subscription's
 * figures with it.
 */
export function parkedEventsPart (parked: Pick<ParkedEvents, 'count'>): MonitoringSource<number> {
  return {
    description: 'the parked platform events',
    read: () => parked.count(),
    queriesDatabase: true,
    metrics: [
      {
        name: 'portal_bff_events_parked',
        help: 'Platform events set aside because their hand-off failed for good (data conflict, incomplete or unknown order), awaiting an operator',
        type: 'gauge',
        samples: (count) => [{ value: count }]
      }
    ]
  }
}

/** This instance's subscription; `resubscribes` counts those it made as the holder, asked for by the reconciliation. */
export function subscriberPart (
  subscription: Pick<PlatformEventSubscription, 'stats'>,
  resubscribes: () => number
): MonitoringSource<SubscriptionStats> {
  return {
    description: 'the platform-event subscription',
    read: () => subscription.stats(),
    metrics: [
      {
        name: 'portal_bff_event_subscriber_state',
        help: 'The platform-event subscription\'s state (1 for the current one)',
        type: 'gauge',
        samples: ({ state }) => stateSamples(SUBSCRIPTION_STATES, state)
      },
      {
        name: 'portal_bff_event_subscriber_events_received_total',
        help: 'Platform events received',
        type: 'counter',
        samples: ({ received }) => [{ value: received }]
      },
      {
        name: 'portal_bff_event_subscriber_reconnects_total',
        help: 'Reconnections of the platform-event subscription',
        type: 'counter',
        samples: ({ reconnects }) => [{ value: reconnects }]
      },
      {
        name: 'portal_bff_event_subscriber_events_dropped_total',
        help: 'Platform events delivered without a replayId or a payload, skipped',
        type: 'counter',
        samples: ({ dropped }) => [{ value: dropped }]
      },
      {
        name: 'portal_bff_event_subscriber_replay_fallbacks_total',
        help: 'Times the CRM no longer retained the stored replay position, so this instance subscribed from the fallback position: events of the gap may be lost',
        type: 'counter',
        samples: ({ replayFallbacks }) => [{ value: replayFallbacks }]
      },
      {
        name: 'portal_bff_event_subscriber_replay_supported',
        help: 'Whether the CRM granted the replay extension at the last handshake (0: degraded, nothing missed is replayed); absent before one',
        type: 'gauge',
        samples: ({ replaySupported }) => replaySupported === null ? [] : [{ value: replaySupported ? 1 : 0 }]
      },
      {
        name: 'portal_bff_event_subscriber_last_event_timestamp_seconds',
        help: 'When the last platform event was received (Unix time)',
        type: 'gauge',
        samples: ({ lastEventAt }) => lastEventAt === null ? [] : [{ value: Date.parse(lastEventAt) / 1000 }]
      },
      {
        name: 'portal_bff_event_subscriber_resubscribes_total',
        help: 'Subscriptions made again from the stored replay position (every retained event when none is stored) because the reconciliation found orders the CRM approved that the connected subscription did not deliver; at most one a ORDERS_PENDING_WARNING_S',
        type: 'counter',
        samples: () => [{ value: resubscribes() }]
      }
    ]
  }
}

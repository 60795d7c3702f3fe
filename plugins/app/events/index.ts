import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import { runInContext } from '../../../lib/log-context.js'
import { orderWorkId } from '../orders/job-queue.js'
import { EventSubscription, SUBSCRIPTION_STATES, type HolderReport, type SubscriptionStats } from './subscription.js'
import { FAILURE_CLASSES, UpstreamFailure } from '../../../lib/errors.js'
import type { Order } from '../orders/store.js'
import { caseSafeId } from '../../../integrations/crm/salesforce-id.js'

declare module 'fastify' {
  interface FastifyInstance {
    eventSubscription: EventSubscription
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    subscriber: SubscriptionStats
    /** What the lease holder, whichever instance it is, last reported; null when no instance holds the lease. */
    subscriptionHolder: HolderReport | null
  }
}

function numberOrNull (value: unknown): number | null {
  const number = Number(value)
  return value !== null && value !== undefined && value !== '' && Number.isInteger(number) ? number : null
}

async function eventSubscriber (fastify: FastifyInstance) {
  const { config, orders, crm, crmQueue, jobQueue, log } = fastify

  /**
   * The order an event names: stored already, or read from the CRM and stored now under the id the
   * CRM gives it. An event may carry the 15-character form of an id the REST API gave in 18.
   */
  async function orderOf (crmOrderId: string): Promise<Order | null> {
    const caseSafe = caseSafeId(crmOrderId)
    const stored = await orders.findByCrmId(crmOrderId) ?? (caseSafe === crmOrderId ? null : await orders.findByCrmId(caseSafe))
    if (stored !== null) return stored
    const record = await crmQueue.run((deadline) => crm.getOrder(crmOrderId, deadline))
    if (record === null) return null
    return await orders.ensure({
      crmOrderId: record.Id,
      billingClientId: numberOrNull(record.BillingClientId__c),
      billingOrderId: numberOrNull(record.BillingOrderId__c),
      productId: String(record.Product__c ?? ''),
      billingCycle: null
    })
  }

  /** The event's order is stored and its job queued before the event counts as received. */
  async function handOff (event: PlatformEventMessage): Promise<void> {
    const crmOrderId = event.data.payload.OrderId__c
    const { replayId } = event.data.event
    if (typeof crmOrderId !== 'string' || crmOrderId === '') {
      log.warn({ replayId }, 'OrderProvisionRequested__e without an OrderId__c: skipped')
      return
    }
    // The hand-off's lines, and its CRM read, carry the order's id, as its provisioning's do.
    const correlationId = orderWorkId(caseSafeId(crmOrderId))
    await runInContext({ correlationId, log: fastify.logFor(correlationId) }, () => handOffOrder(crmOrderId, replayId))
  }

  async function handOffOrder (crmOrderId: string, replayId: number): Promise<void> {
    const order = await orderOf(crmOrderId)
    if (order === null) {
      log.warn({ replayId, crmOrderId }, 'OrderProvisionRequested__e names an order the CRM does not have: skipped')
      return
    }
    // The stored id, not the event's form of it: one job per order, whichever form events carry.
    const storedId = order.crmOrderId ?? crmOrderId
    await jobQueue.enqueue(storedId)
    log.info({ replayId, crmOrderId: storedId, ...(storedId === crmOrderId ? {} : { eventOrderId: crmOrderId }), orderId: order.id }, 'provisioning requested')
  }

  const subscription = new EventSubscription({
    enabled: config.CRM_EVENTS_ENABLED,
    replay: config.CRM_EVENTS_REPLAY,
    redis: fastify.redis,
    keyPrefix: config.REDIS_KEY_PREFIX,
    crm,
    apiVersion: config.CRM_API_VERSION,
    leaseTtlMs: config.CRM_EVENTS_LEASE_TTL_MS,
    connectTimeoutMarginMs: config.CRM_EVENTS_CONNECT_MARGIN_MS,
    handOff,
    // A hand-off's upstream work is one CRM read, which the CRM queue bounds anyway.
    handOffConcurrency: config.CRM_QUEUE_CONCURRENCY,
    log
  })
  fastify.decorate('eventSubscription', subscription)

  if (config.CRM_EVENTS_ENABLED) {
    // Fails while no instance holds a connected subscription: the specification's silent outage made loud.
    fastify.integrationHealth.register('events', async () => {
      const holder = await subscription.holder()
      if (holder?.state === 'connected') return
      // The class of the stream's last failure (connection_refused, timeout...) when it has one.
      const failure = FAILURE_CLASSES.find((known) => known === holder?.lastError) ?? 'upstream_error'
      throw new UpstreamFailure(failure, 'crm', `platform-event subscription ${holder === null ? 'held by no instance' : holder.state}`)
    })
    // Every instance reports the holder it sees, so the rules can tell "nobody holds it" from "held, not connected".
    fastify.monitoring.register('subscriptionHolder', {
      description: 'the platform-event subscription lease holder',
      read: () => subscription.holder(),
      metrics: [{
        name: 'portal_bff_event_subscription_holder_state',
        help: 'The state the platform-event subscription\'s lease holder (any instance) last reported, 1 for the current one; none: no instance holds the lease',
        type: 'gauge',
        samples: (holder) => ['none', ...SUBSCRIPTION_STATES].map((state) => ({ labels: { state }, value: state === (holder?.state ?? 'none') ? 1 : 0 }))
      }]
    })
  }
  fastify.monitoring.register('subscriber', {
    description: 'the platform-event subscription',
    read: () => subscription.stats(),
    metrics: [
      {
        name: 'portal_bff_event_subscriber_state',
        help: 'The platform-event subscription\'s state (1 for the current one)',
        type: 'gauge',
        samples: ({ state: current }) => SUBSCRIPTION_STATES.map((state) => ({ labels: { state }, value: state === current ? 1 : 0 }))
      },
      { name: 'portal_bff_event_subscriber_events_received_total', help: 'Platform events received', type: 'counter', samples: ({ received }) => [{ value: received }] },
      { name: 'portal_bff_event_subscriber_reconnects_total', help: 'Reconnections of the platform-event subscription', type: 'counter', samples: ({ reconnects }) => [{ value: reconnects }] },
      { name: 'portal_bff_event_subscriber_events_dropped_total', help: 'Platform events delivered without a replayId or a payload, skipped', type: 'counter', samples: ({ dropped }) => [{ value: dropped }] },
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
        help: 'Subscriptions made again from the stored replay position because orders waited in Pending Review past ORDERS_PENDING_WARNING_S while the subscription looked connected',
        type: 'counter',
        samples: () => [{ value: resubscribes }]
      }
    ]
  })

  // The specification's incident, healed without a restart: a subscription that looks connected
  // while the oldest order waits past the warning age subscribes again from its stored position
  // (replayed events are harmless: the job id is the CRM order id), at most once a warning period.
  const warningMs = config.ORDERS_PENDING_WARNING_S * 1000
  let resubscribes = 0
  let resubscribedAt = -Infinity
  async function healStuckOrders (): Promise<void> {
    if (subscription.stats().state !== 'connected' || performance.now() - resubscribedAt < warningMs) return
    const { count, oldestAgeSeconds } = await orders.pendingReview()
    if (oldestAgeSeconds === null || oldestAgeSeconds * 1000 < warningMs) return
    resubscribedAt = performance.now()
    if (!await subscription.resubscribe()) return
    resubscribes++
    log.warn({ pendingOrders: count, oldestAgeSeconds: Math.round(oldestAgeSeconds), resubscribes }, 'platform events: connected, but an order has waited in Pending Review past ORDERS_PENDING_WARNING_S; subscribing again from the stored replay position')
  }
  const healing = config.CRM_EVENTS_ENABLED
    ? setInterval(() => { healStuckOrders().catch((error: unknown) => log.warn({ err: error }, 'stuck-order check failed')) }, Math.min(30_000, warningMs / 2)).unref()
    : undefined

  fastify.addHook('onReady', async () => subscription.start())
  fastify.addHook('onClose', async () => {
    clearInterval(healing)
    await subscription.stop()
  })
}

export default fp(eventSubscriber, { name: 'event-subscriber', fastify: '5.x', dependencies: ['orders', 'job-queue', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

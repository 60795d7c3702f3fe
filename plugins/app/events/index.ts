import { randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import { runInContext } from '../../../lib/log-context.js'
import { SpanKind, inSpan } from '../../../lib/tracing.js'
import { orderWorkId } from '../orders/job-queue.js'
import { EventSubscription, SUBSCRIPTION_STATES, type HolderReport, type SubscriptionStats } from './subscription.js'
import { FAILURE_CLASSES, UpstreamFailure } from '../../../lib/errors.js'
import type { Order } from '../orders/store.js'
import { caseSafeId } from '../../../integrations/crm/salesforce-id.js'
import { ReplayPositions } from './replay-positions.js'

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

// How often each instance looks for the job queue's epoch key, and how long one instance's claim to
// queue the lost jobs again holds before another may try.
const JOBS_EPOCH_CHECK_MS = 5000
const JOBS_EPOCH_CLAIM_MS = 60_000
const REQUEUE_CHUNK = 50

const RELEASE_CLAIM = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

function numberOrNull (value: unknown): number | null {
  const number = Number(value)
  return value !== null && value !== undefined && value !== '' && Number.isInteger(number) ? number : null
}

async function eventSubscriber (fastify: FastifyInstance) {
  const { config, orders, crm, crmQueue, jobQueue, log } = fastify

  /**
   * The order an event names, marked as handed to the job queue: stored already, or read from the
   * CRM and stored now under the id the CRM gives it. An event may carry the 15-character form of
   * an id the REST API gave in 18. Marked in the statement that finds or stores it, before the job
   * is queued: should Redis lose the job, the order is known to be waiting for one.
   */
  async function requestProvisioning (crmOrderId: string): Promise<Order | null> {
    const caseSafe = caseSafeId(crmOrderId)
    const stored = await orders.markProvisioningRequested(crmOrderId) ?? (caseSafe === crmOrderId ? null : await orders.markProvisioningRequested(caseSafe))
    if (stored !== null) return stored
    const record = await crmQueue.run((deadline) => crm.getOrder(crmOrderId, deadline))
    if (record === null) return null
    return await orders.ensure({
      crmOrderId: record.Id,
      billingClientId: numberOrNull(record.BillingClientId__c),
      billingOrderId: numberOrNull(record.BillingOrderId__c),
      productId: String(record.Product__c ?? ''),
      billingCycle: null
    }, { provisioningRequested: true })
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
    await inSpan('platform event hand-off', {
      kind: SpanKind.CONSUMER,
      root: true,
      attributes: { 'messaging.destination.name': event.channel, 'messaging.message.id': String(replayId), 'crm.order_id': crmOrderId }
    }, () => runInContext({ correlationId, log: fastify.logFor(correlationId) }, () => handOffOrder(crmOrderId, replayId)))
  }

  async function handOffOrder (crmOrderId: string, replayId: number): Promise<void> {
    const order = await requestProvisioning(crmOrderId)
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
    positions: new ReplayPositions(fastify.pg.pool),
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

  // Queued jobs live in Redis alone. An epoch key beside them, written once their orders' jobs are
  // queued: missing, Redis is new or lost its data (restarted empty, failed over, emptied), and the
  // first instance to notice queues again the jobs of every order still waiting for its own. The
  // job id is the CRM order id: a job Redis still holds is not made twice.
  const jobsEpochKey = `${config.REDIS_KEY_PREFIX}provisioning:epoch`
  async function requeueLostJobs (atStart: boolean): Promise<void> {
    const claim = randomUUID()
    // Redis away: nothing to claim, and its absence is reported elsewhere.
    const claimed = await fastify.redis.set(jobsEpochKey, claim, 'PX', JOBS_EPOCH_CLAIM_MS, 'NX').catch(() => null)
    if (claimed !== 'OK') return
    try {
      const crmOrderIds = await orders.awaitingProvisioning()
      log[atStart && crmOrderIds.length === 0 ? 'info' : 'warn']({ orders: crmOrderIds.length },
        `Redis holds no job queue epoch (new, restarted empty or emptied): queueing again the jobs of ${crmOrderIds.length} orders awaiting provisioning`)
      for (let start = 0; start < crmOrderIds.length; start += REQUEUE_CHUNK) {
        await Promise.all(crmOrderIds.slice(start, start + REQUEUE_CHUNK).map((crmOrderId) => jobQueue.enqueue(crmOrderId)))
      }
      await fastify.redis.set(jobsEpochKey, new Date().toISOString())
    } catch (error) {
      log.warn({ err: error }, 'jobs lost with Redis\'s data not all queued again: retried shortly')
      await fastify.redis.eval(RELEASE_CLAIM, 1, jobsEpochKey, claim).catch(() => {})
    }
  }
  let requeueing: Promise<void> | undefined
  const requeue = (atStart = false) => {
    requeueing ??= requeueLostJobs(atStart).finally(() => { requeueing = undefined })
    return requeueing
  }
  let watchingJobs: NodeJS.Timeout | undefined

  fastify.addHook('onReady', async () => {
    await requeue(true)
    watchingJobs = setInterval(() => { requeue() }, JOBS_EPOCH_CHECK_MS).unref()
    subscription.start()
  })
  fastify.addHook('onClose', async () => {
    clearInterval(healing)
    clearInterval(watchingJobs)
    await Promise.all([requeueing, subscription.stop()])
  })
}

export default fp(eventSubscriber, { name: 'event-subscriber', fastify: '5.x', dependencies: ['orders', 'job-queue', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

import { randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { EventSubscription, ORDER_PROVISION_CHANNEL } from './subscription.js'
import { HOLDER_STATES, SUBSCRIPTION_STATES, type HolderView, type SubscriptionStats } from './holder-state.js'
import { FAILURE_CLASSES, UpstreamFailure } from '../../../lib/errors.js'
import { ReplayPositions } from './replay-positions.js'
import { OrderHandOff } from './hand-off.js'
import { ParkedEvents } from './parked-events.js'
import * as redisKeys from '../redis-keys.js'

declare module 'fastify' {
  interface FastifyInstance {
    eventSubscription: EventSubscription
    /** The platform events set aside because their hand-off failed for good. */
    parkedEvents: ParkedEvents
    eventHandOff: OrderHandOff
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    subscriber: SubscriptionStats
    /** The platform events parked, in PostgreSQL: every instance counts the same ones. */
    parkedEvents: number
    /** The lease holder's state as this instance sees it, and its age. */
    subscriptionHolder: HolderView
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

async function eventSubscriber (fastify: FastifyInstance) {
  const { config, orders, crm, crmQueue, jobQueue, log } = fastify

  const parked = new ParkedEvents(fastify.pg.pool)
  const handOffs = new OrderHandOff({ channel: ORDER_PROVISION_CHANNEL, orders, crm, crmQueue, jobQueue, parked, log, logFor: fastify.logFor })
  fastify.decorate('parkedEvents', parked)
  fastify.decorate('eventHandOff', handOffs)

  // Resubscriptions this instance made as the holder, asked for by the reconciliation (orders/crm-status.ts).
  let resubscribes = 0
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
    handOff: (event) => handOffs.handOff(event),
    // A hand-off's upstream work is one CRM read, which the CRM queue bounds anyway.
    handOffConcurrency: config.CRM_QUEUE_CONCURRENCY,
    onResubscribe: () => { resubscribes++ },
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
  }
  // Every instance reports the holder it sees, whatever the setting, so the rules can tell "nobody
  // holds it" from "held, not connected", and a disabled or silent subscription is never invisible.
  fastify.monitoring.register('subscriptionHolder', {
    description: 'the platform-event subscription lease holder',
    read: () => subscription.holderView(),
    metrics: [
      {
        name: 'portal_bff_event_subscription_holder_state',
        help: 'The platform-event subscription\'s lease holder as this instance sees it, 1 for the current state: none (no instance holds the lease), the holder\'s own report, stale (its report is older than two renewals), unknown (older than a takeover takes), disabled (CRM_EVENTS_ENABLED is not true here)',
        type: 'gauge',
        samples: ({ state: current }) => HOLDER_STATES.map((state) => ({ labels: { state }, value: state === current ? 1 : 0 }))
      },
      {
        name: 'portal_bff_event_subscription_holder_state_age_seconds',
        help: 'Seconds since the holder state was last confirmed (by the settings, by Redis, or by the holder\'s report)',
        type: 'gauge',
        samples: ({ ageSeconds }) => [{ value: ageSeconds }]
      }
    ]
  })
  // A part of its own: a slow database must not take the subscription's figures with it.
  fastify.monitoring.register('parkedEvents', {
    description: 'the parked platform events',
    read: () => parked.count(),
    metrics: [{ name: 'portal_bff_events_parked', help: 'Platform events set aside because their hand-off failed for good (data conflict, incomplete or unknown order), awaiting an operator', type: 'gauge', samples: (count) => [{ value: count }] }]
  })
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
        help: 'Subscriptions made again from the stored replay position (every retained event when none is stored) because the reconciliation found orders the CRM approved that the connected subscription did not deliver; at most one a ORDERS_PENDING_WARNING_S',
        type: 'counter',
        samples: () => [{ value: resubscribes }]
      }
    ]
  })

  // Queued jobs live in Redis alone. An epoch key beside them, written once their orders' jobs are
  // queued: missing, Redis is new or lost its data (restarted empty, failed over, emptied), and the
  // first instance to notice queues again the jobs of every order still waiting for its own. The
  // job id is the CRM order id: a job Redis still holds is not made twice.
  const jobsEpochKey = redisKeys.jobsEpochKey(config.REDIS_KEY_PREFIX)
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
    clearInterval(watchingJobs)
    await Promise.all([requeueing, subscription.stop()])
  })
}

export default fp(eventSubscriber, { name: 'event-subscriber', fastify: '5.x', dependencies: ['orders', 'job-queue', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

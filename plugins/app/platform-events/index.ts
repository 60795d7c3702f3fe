import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { PlatformEventSubscription, ORDER_PROVISION_CHANNEL } from './subscription.js'
import type { HolderView, SubscriptionStats } from './holder-state.js'
import { ReplayPositions } from './replay-positions.js'
import { OrderHandOff } from './hand-off.js'
import { ParkedEvents } from './parked-events.js'
import { LostJobs } from './lost-jobs.js'
import { platformEventsCheck, holderPart, parkedEventsPart, subscriberPart } from './measures.js'
import { jobsEpochKey } from '../redis-keys.js'

/** The operator's hand on the parked events, registered with `/health/queues` (routes/queues.ts), which counts them. */
export { default as parkedEventRoutes } from './routes.js'

/**
 * The platform events' one face on the root: what `/health/queues`, the integration health, the
 * parked-event routes and the orders' CRM status task read (decision 0129).
 */
export interface PlatformEvents {
  subscription: PlatformEventSubscription
  /** The platform events set aside because their hand-off failed for good. */
  parked: ParkedEvents
  handOff: OrderHandOff
}

declare module 'fastify' {
  interface FastifyInstance {
    platformEvents: PlatformEvents
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

async function platformEvents (fastify: FastifyInstance) {
  const { config, upstreams: { crm }, log } = fastify
  const { store: orders, jobs: jobQueue } = fastify.orders

  const parked = new ParkedEvents(fastify.pg.pool)
  const handOffs = new OrderHandOff({
    channel: ORDER_PROVISION_CHANNEL,
    orders,
    crm: crm.client,
    crmQueue: crm.queue,
    jobQueue,
    parked,
    log,
    logFor: fastify.logFor
  })

  // Resubscriptions this instance made as the holder, asked for by the reconciliation (orders/crm-status.ts).
  let resubscribes = 0
  const subscription = new PlatformEventSubscription({
    enabled: config.CRM_EVENTS_ENABLED,
    replay: config.CRM_EVENTS_REPLAY,
    redis: fastify.redis,
    positions: new ReplayPositions(fastify.pg.pool),
    keyPrefix: config.REDIS_KEY_PREFIX,
    crm: crm.client,
    apiVersion: config.CRM_API_VERSION,
    leaseTtlMs: config.CRM_EVENTS_LEASE_TTL_MS,
    connectTimeoutMarginMs: config.CRM_EVENTS_CONNECT_MARGIN_MS,
    handOff: (event) => handOffs.handOff(event),
    // A hand-off's upstream work is one CRM read, which the CRM queue bounds anyway.
    handOffConcurrency: config.CRM_QUEUE_CONCURRENCY,
    onResubscribe: () => { resubscribes++ },
    log
  })
  fastify.decorate('platformEvents', { subscription, parked, handOff: handOffs })

  if (config.CRM_EVENTS_ENABLED) fastify.health.integrations.register('events', platformEventsCheck(subscription))
  fastify.monitoring.register('subscriptionHolder', holderPart(subscription))
  fastify.monitoring.register('parkedEvents', parkedEventsPart(parked))
  fastify.monitoring.register('subscriber', subscriberPart(subscription, () => resubscribes))

  const lostJobs = new LostJobs({
    redis: fastify.redis,
    epochKey: jobsEpochKey(config.REDIS_KEY_PREFIX),
    orders,
    jobQueue,
    log
  })
  fastify.addHook('onReady', async () => {
    await lostJobs.start()
    subscription.start()
  })
  fastify.addHook('onClose', async () => {
    await Promise.all([lostJobs.stop(), subscription.stop()])
  })
}

export default fp(platformEvents, {
  name: 'platform-events',
  fastify: '5.x',
  dependencies: ['orders', 'upstreams', 'monitoring'],
  decorators: { fastify: ['config'] }
})

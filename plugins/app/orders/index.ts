import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OrderEvents } from './status-events.js'
import { OrderPlacement } from './placement.js'
import { OrderStore } from './store.js'
import { closeRedis } from '../../external/redis.js'

declare module 'fastify' {
  interface FastifyInstance {
    orders: OrderStore
    orderEvents: OrderEvents
    orderPlacement: OrderPlacement
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** Portal orders waiting in `Pending Review` for their platform event. */
    ordersPending: { count: number, oldestAgeSeconds: number | null }
  }
}

// Enough for a client that reconnects after a short outage to miss nothing.
const BACKLOG_LENGTH = 100
// A backlog only serves such a reconnection: a client with no change for a day has its key removed.
const BACKLOG_RETENTION_SECONDS = 86_400

async function orders (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, REDIS_COMMAND_TIMEOUT_MS } = fastify.config
  const subscriber = fastify.redis.duplicate({ enableOfflineQueue: true, autoResubscribe: false })
  subscriber.on('error', () => {})
  const orderEvents = new OrderEvents({
    redis: fastify.redis,
    subscriber,
    keyPrefix: REDIS_KEY_PREFIX,
    backlogLength: BACKLOG_LENGTH,
    backlogRetentionSeconds: BACKLOG_RETENTION_SECONDS,
    commandTimeoutMs: REDIS_COMMAND_TIMEOUT_MS,
    log: fastify.log
  })
  await orderEvents.start()
  const store = new OrderStore(fastify.pg.pool)
  const { billing, billingQueue, crm, crmQueue } = fastify
  fastify.decorate('orders', store)
  fastify.decorate('orderEvents', orderEvents)
  fastify.decorate('orderPlacement', new OrderPlacement({
    store,
    events: orderEvents,
    upstreams: {
      addBillingOrder: (order) => billingQueue.run((deadline) => billing.addOrder(order, deadline)),
      createCrmOrder: (fields) => crmQueue.run((deadline) => crm.createOrder(fields, deadline))
    },
    crmAccountId: fastify.config.CRM_ORDER_ACCOUNT_ID
  }))
  fastify.monitoring.register('ordersPending', {
    description: 'the orders store',
    read: () => store.pendingReview(),
    measures: {
      orders_pending_age: ({ count, oldestAgeSeconds }) => ({ value: oldestAgeSeconds ?? 0, ...(count === 0 && { note: 'no order waits in Pending Review' }) })
    },
    metrics: [
      { name: 'portal_bff_orders_pending', help: 'Portal orders in Pending Review, waiting for their platform event', type: 'gauge', samples: ({ count }) => [{ value: count }] },
      {
        name: 'portal_bff_orders_pending_oldest_age_seconds',
        help: 'Age of the oldest portal order in Pending Review; 0 when none waits',
        type: 'gauge',
        samples: ({ oldestAgeSeconds }) => [{ value: Math.round(oldestAgeSeconds ?? 0) }]
      }
    ]
  })
  fastify.addHook('onClose', async () => {
    orderEvents.stop()
    await closeRedis(subscriber)
  })
}

export default fp(orders, { name: 'orders', fastify: '5.x', dependencies: ['db', 'redis', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

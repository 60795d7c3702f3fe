import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OrderStatusChanges } from './status-changes.js'
import { OrderStore } from './store.js'
import { PendingOrderStore, type PendingOrders } from './pending-orders.js'
import { ordersPendingPart } from './measures.js'

declare module 'fastify' {
  interface FastifyInstance {
    orders: OrderStore
    statusChanges: OrderStatusChanges
    /** The orders in `Pending Review`, as the CRM's word tells them apart. */
    pendingOrders: PendingOrderStore
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** Portal orders waiting in `Pending Review` for the CRM: awaiting approval, or approved and not received. */
    ordersPending: PendingOrders
  }
}

// Enough for a client that reconnects after a short outage to miss nothing.
const BACKLOG_LENGTH = 100
// A backlog only serves such a reconnection: a client with no change for a day has its key removed.
const BACKLOG_RETENTION_SECONDS = 86_400

async function orders (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, REDIS_COMMAND_TIMEOUT_MS } = fastify.config
  const statusChanges = new OrderStatusChanges({
    redis: fastify.redis,
    pubsub: fastify.pubsub,
    keyPrefix: REDIS_KEY_PREFIX,
    backlogLength: BACKLOG_LENGTH,
    backlogRetentionSeconds: BACKLOG_RETENTION_SECONDS,
    commandTimeoutMs: REDIS_COMMAND_TIMEOUT_MS,
    log: fastify.log
  })
  await statusChanges.start()
  const store = new OrderStore(fastify.pg.pool)
  const pendingOrders = new PendingOrderStore(fastify.pg.pool)
  fastify.decorate('orders', store)
  fastify.decorate('pendingOrders', pendingOrders)
  fastify.decorate('statusChanges', statusChanges)
  fastify.monitoring.register('ordersPending', ordersPendingPart(pendingOrders))
  fastify.addHook('onClose', async () => { statusChanges.stop() })
}

export default fp(orders, { name: 'orders', fastify: '5.x', dependencies: ['db', 'redis', 'pubsub', 'monitoring'], decorators: { fastify: ['config'] } })

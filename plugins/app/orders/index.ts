import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OrderStatusChanges } from './status-changes.js'
import { OrderStore } from './store.js'
import { PendingOrderStore, type PendingOrders } from './pending-orders.js'
import { ordersPendingPart } from './measures.js'
import { openJobQueue, type ProvisioningJobQueue } from './job-queue.js'

/** What the orders feature scope registers (app.ts): placing orders, the CRM status rounds and the order routes. */
export { default as orderPlacement } from './order-placement.js'
export { default as orderCrmStatus } from './crm-status.js'
export { default as orderRoutes } from './routes.js'

/**
 * The orders concern's one face on the root: what the platform events, `/health/queues`, the SSE
 * streams and the order routes read. Placing orders stays in the orders feature scope (decision 0129).
 */
export interface Orders {
  store: OrderStore
  /** The orders in `Pending Review`, as the CRM's word tells them apart. */
  pending: PendingOrderStore
  statusChanges: OrderStatusChanges
  /** The provisioning jobs, and the worker that runs them. */
  jobs: ProvisioningJobQueue
}

declare module 'fastify' {
  interface FastifyInstance {
    orders: Orders
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
  // Added before the job queue's: onClose hooks run last first, so the worker stops before the status changes.
  fastify.addHook('onClose', async () => { statusChanges.stop() })
  const store = new OrderStore(fastify.pg.pool)
  const pending = new PendingOrderStore(fastify.pg.pool)
  fastify.monitoring.register('ordersPending', ordersPendingPart(pending))
  const jobs = await openJobQueue(fastify, { store, statusChanges })
  fastify.decorate('orders', { store, pending, statusChanges, jobs })
}

export default fp(orders, {
  name: 'orders',
  fastify: '5.x',
  dependencies: ['database', 'redis', 'pubsub', 'monitoring', 'upstreams'],
  decorators: { fastify: ['config'] }
})

import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OrderStatusChanges } from './status-changes.js'
import { IdempotencyKeys } from './idempotency.js'
import { OrderPlacement } from './placement.js'
import { PlacementStore } from './placement-store.js'
import { placementRecovery, expiredIdempotencyKeys } from './recovery.js'
import { Reconciliation } from './reconciliation.js'
import { OrderStore } from './store.js'
import { PendingOrderStore, type Counted, type PendingOrders } from './pending-orders.js'
import { ordersPendingPart, placementsPart } from './measures.js'

declare module 'fastify' {
  interface FastifyInstance {
    orders: OrderStore
    statusChanges: OrderStatusChanges
    orderPlacement: OrderPlacement
    orderIdempotencyKeys: IdempotencyKeys
    /** The periodic reconciliation of orders with the upstreams (one instance a round). */
    orderReconciliation: Reconciliation
    /** The orders in `Pending Review`, as the CRM's word tells them apart. */
    pendingOrders: PendingOrderStore
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** Portal orders waiting in `Pending Review` for the CRM: awaiting approval, or approved and not received. */
    ordersPending: PendingOrders
    /** Order placements not yet finished or undone. */
    placementsUnfinished: Counted
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
  const { billing, billingQueue, crm, crmQueue, config } = fastify
  const placements = new PlacementStore(fastify.pg.pool)
  // Long enough for every step of a request's placement to have run out its own bound.
  const claimMs = 3 * config.DATABASE_QUERY_TIMEOUT_MS + 2 * config.BILLING_QUEUE_TIMEOUT_MS + 2 * config.CRM_QUEUE_TIMEOUT_MS
  const orderPlacement = new OrderPlacement({
    placements,
    statusChanges,
    upstreams: {
      addBillingOrder: (order) => billingQueue.run((deadline) => billing.addOrder(order, deadline)),
      createCrmOrder: (fields) => crmQueue.run((deadline) => crm.createOrder(fields, deadline)),
      findCrmOrder: (billingOrderId) => crmQueue.run((deadline) => crm.findOrderIdByBillingOrderId(billingOrderId, deadline)),
      cancelBillingOrder: (billingOrderId) => billingQueue.run((deadline) => billing.cancelOrder(billingOrderId, deadline)),
      pendingBillingOrders: (clientId) => billingQueue.run((deadline) => billing.getPendingOrders(clientId, deadline))
    },
    crmAccountId: config.CRM_ORDER_ACCOUNT_ID,
    claimMs,
    log: fastify.log
  })
  const idempotencyKeys = new IdempotencyKeys({ pool: fastify.pg.pool, placements, retentionSeconds: config.ORDERS_IDEMPOTENCY_KEY_TTL_S })
  const reconciliation = new Reconciliation({
    pool: fastify.pg.pool,
    intervalMs: config.ORDERS_RECONCILE_INTERVAL_S * 1000,
    holder: `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
    tasks: [
      placementRecovery({ placements, placement: orderPlacement, log: fastify.log }),
      expiredIdempotencyKeys(idempotencyKeys)
    ],
    log: fastify.log
  })
  fastify.decorate('orders', store)
  fastify.decorate('pendingOrders', pendingOrders)
  fastify.decorate('statusChanges', statusChanges)
  fastify.decorate('orderPlacement', orderPlacement)
  fastify.decorate('orderIdempotencyKeys', idempotencyKeys)
  fastify.decorate('orderReconciliation', reconciliation)
  fastify.addHook('onReady', async () => { reconciliation.start() })
  fastify.monitoring.register('placementsUnfinished', placementsPart(placements))
  fastify.monitoring.register('ordersPending', ordersPendingPart(pendingOrders))
  fastify.addHook('onClose', async () => {
    await reconciliation.stop()
    statusChanges.stop()
  })
}

export default fp(orders, { name: 'orders', fastify: '5.x', dependencies: ['db', 'redis', 'pubsub', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

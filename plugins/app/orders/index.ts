import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OrderEvents } from './status-events.js'
import { IdempotencyKeys } from './idempotency.js'
import { OrderPlacement } from './placement.js'
import { PlacementStore } from './placement-store.js'
import { placementRecovery, expiredIdempotencyKeys } from './recovery.js'
import { Reconciliation } from './reconciliation.js'
import { OrderStore } from './store.js'
import { PendingOrderStore, type Counted, type PendingOrders } from './pending-orders.js'
import type { PartMetric } from '../monitoring/index.js'

declare module 'fastify' {
  interface FastifyInstance {
    orders: OrderStore
    orderEvents: OrderEvents
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

/** A gauge of how many orders are in some state, and one of the oldest one's age (`_oldest_age_seconds`), read from a part. */
function countAndAge<T> (name: string, help: string, ageHelp: string, counted: (part: T) => Counted): Array<PartMetric<T>> {
  return [
    { name, help, type: 'gauge', samples: (part) => [{ value: counted(part).count }] },
    { name: `${name}_oldest_age_seconds`, help: ageHelp, type: 'gauge', samples: (part) => [{ value: Math.round(counted(part).oldestAgeSeconds ?? 0) }] }
  ]
}

async function orders (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, REDIS_COMMAND_TIMEOUT_MS } = fastify.config
  const orderEvents = new OrderEvents({
    redis: fastify.redis,
    pubsub: fastify.pubsub,
    keyPrefix: REDIS_KEY_PREFIX,
    backlogLength: BACKLOG_LENGTH,
    backlogRetentionSeconds: BACKLOG_RETENTION_SECONDS,
    commandTimeoutMs: REDIS_COMMAND_TIMEOUT_MS,
    log: fastify.log
  })
  await orderEvents.start()
  const store = new OrderStore(fastify.pg.pool)
  const pendingOrders = new PendingOrderStore(fastify.pg.pool)
  const { billing, billingQueue, crm, crmQueue, config } = fastify
  const placements = new PlacementStore(fastify.pg.pool)
  // Long enough for every step of a request's placement to have run out its own bound.
  const claimMs = 3 * config.DATABASE_QUERY_TIMEOUT_MS + 2 * config.BILLING_QUEUE_TIMEOUT_MS + 2 * config.CRM_QUEUE_TIMEOUT_MS
  const orderPlacement = new OrderPlacement({
    placements,
    events: orderEvents,
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
  fastify.decorate('orderEvents', orderEvents)
  fastify.decorate('orderPlacement', orderPlacement)
  fastify.decorate('orderIdempotencyKeys', idempotencyKeys)
  fastify.decorate('orderReconciliation', reconciliation)
  fastify.addHook('onReady', async () => { reconciliation.start() })
  fastify.monitoring.register('placementsUnfinished', {
    description: 'the orders store',
    read: () => placements.unfinished(),
    metrics: countAndAge('portal_bff_order_placements_unfinished', 'Order placements neither finished nor undone yet (the recovery finishes or undoes them)',
      'Age of the oldest order placement neither finished nor undone; 0 when none', (unfinished) => unfinished)
  })
  fastify.monitoring.register('ordersPending', {
    description: 'the orders store',
    read: () => pendingOrders.count(),
    measures: {
      orders_pending_age: ({ approvedNotReceived: { count, oldestAgeSeconds } }) => ({ value: oldestAgeSeconds ?? 0, ...(count === 0 && { note: 'no order the CRM approved waits in Pending Review' }) })
    },
    metrics: [
      ...countAndAge('portal_bff_orders_pending', 'Orders the CRM approved (as the reconciliation last read their Status) still in Pending Review: their platform event did not come, and their provisioning has not started',
        'Seconds since the reconciliation found the oldest of those orders approved; 0 when none waits', (pending: PendingOrders) => pending.approvedNotReceived),
      ...countAndAge('portal_bff_orders_awaiting_approval', 'Portal orders in Pending Review whose CRM order awaits approval (its Status still Pending Review, or not asked yet); never judged',
        'Age of the oldest portal order awaiting approval in the CRM; 0 when none does', (pending: PendingOrders) => pending.awaitingApproval)
    ]
  })
  fastify.addHook('onClose', async () => {
    await reconciliation.stop()
    orderEvents.stop()
  })
}

export default fp(orders, { name: 'orders', fastify: '5.x', dependencies: ['db', 'redis', 'pubsub', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

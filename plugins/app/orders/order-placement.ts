import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { IdempotencyKeys } from './idempotency.js'
import { OrderPlacement } from './placement.js'
import { PlacementStore } from './placement-store.js'
import { placementRecovery, expiredIdempotencyKeys } from './recovery.js'
import { Reconciliation } from './reconciliation.js'
import type { Counted } from './pending-orders.js'
import { placementsPart } from './measures.js'

// Registered in the orders feature scope (portalApi in app.ts): only the order routes and the
// reconciliation's tasks read these, so they are not on the root instance.
declare module 'fastify' {
  interface FastifyInstance {
    orderPlacement: OrderPlacement
    orderIdempotencyKeys: IdempotencyKeys
    /** The periodic reconciliation of orders with the upstreams (one instance a round). */
    orderReconciliation: Reconciliation
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** Order placements not yet finished or undone. */
    placementsUnfinished: Counted
  }
}

// How long a request's hold on a keyed placement lasts unrenewed: a retry with the key takes the
// placement over this long after its instance died, within the contract's 10 s with room to spare.
const PLACEMENT_LEASE_MS = 5000

async function orderPlacement (fastify: FastifyInstance) {
  const { upstreams: { billing, crm }, config } = fastify
  const { statusChanges } = fastify.orders
  const placements = new PlacementStore(fastify.pg.pool)
  // Long enough for every step of a request's placement to have run out its own bound.
  const claimMs =
    3 * config.DATABASE_QUERY_TIMEOUT_MS + 2 * config.BILLING_QUEUE_TIMEOUT_MS + 2 * config.CRM_QUEUE_TIMEOUT_MS
  const placement = new OrderPlacement({
    placements,
    statusChanges,
    upstreams: {
      addBillingOrder: (order) => billing.queue.run((deadline) => billing.client.addOrder(order, deadline)),
      createCrmOrder: (fields) => crm.queue.run((deadline) => crm.client.createOrder(fields, deadline)),
      findCrmOrder: (billingOrderId) =>
        crm.queue.run((deadline) => crm.client.findOrderIdByBillingOrderId(billingOrderId, deadline)),
      cancelBillingOrder: (billingOrderId) =>
        billing.queue.run((deadline) => billing.client.cancelOrder(billingOrderId, deadline)),
      pendingBillingOrders: (clientId) =>
        billing.queue.run((deadline) => billing.client.getPendingOrders(clientId, deadline))
    },
    crmAccountId: config.CRM_ORDER_ACCOUNT_ID,
    claimMs,
    leaseMs: PLACEMENT_LEASE_MS,
    resumableMs: config.ORDERS_PLACEMENT_RESUME_S * 1000,
    log: fastify.log
  })
  const idempotencyKeys = new IdempotencyKeys({
    pool: fastify.pg.pool,
    placements,
    retentionSeconds: config.ORDERS_IDEMPOTENCY_KEY_TTL_S
  })
  const reconciliation = new Reconciliation({
    pool: fastify.pg.pool,
    intervalMs: config.ORDERS_RECONCILE_INTERVAL_S * 1000,
    holder: `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
    tasks: [
      placementRecovery({ placements, placement, log: fastify.log }),
      expiredIdempotencyKeys(idempotencyKeys)
    ],
    log: fastify.log
  })
  fastify.decorate('orderPlacement', placement)
  fastify.decorate('orderIdempotencyKeys', idempotencyKeys)
  fastify.decorate('orderReconciliation', reconciliation)
  fastify.addHook('onReady', async () => { reconciliation.start() })
  fastify.monitoring.register('placementsUnfinished', placementsPart(placements))
  fastify.addHook('onClose', async () => { await reconciliation.stop() })
}

export default fp(orderPlacement, {
  name: 'order-placement',
  fastify: '5.x',
  dependencies: ['orders', 'database', 'upstreams', 'monitoring'],
  decorators: { fastify: ['config'] }
})

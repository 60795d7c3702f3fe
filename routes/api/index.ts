import type { FastifyPluginAsync } from 'fastify'
import orderPlacement from '../../plugins/app/orders/order-placement.js'
import orderCrmStatus from '../../plugins/app/orders/crm-status.js'
import invoiceRoutes from './invoices.js'
import orderRoutes from './orders.js'
import eventRoutes from './events.js'

/**
 * The orders feature scope: placing an order, its idempotency keys and the reconciliation with its
 * tasks are read by the order routes only, so they live here with them rather than on the root,
 * which keeps what other concerns read: the store, the orders in Pending Review, the status changes
 * and the job queue (decision 0075).
 */
const orderScope: FastifyPluginAsync = async (scope) => {
  await scope.register(orderPlacement)
  await scope.register(orderCrmStatus)
  await scope.register(orderRoutes)
}

/** The portal API: every route in this scope needs the database reachable and a valid access token. */
const portalApi: FastifyPluginAsync = async (fastify) => {
  fastify.addHook('onRequest', fastify.requireDatabase)
  fastify.addHook('onRequest', fastify.authenticate)
  await fastify.register(invoiceRoutes)
  await fastify.register(orderScope)
  await fastify.register(eventRoutes)
}

export default portalApi

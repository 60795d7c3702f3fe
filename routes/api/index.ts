import type { FastifyPluginAsync } from 'fastify'
import invoiceRoutes from './invoices.js'
import orderRoutes from './orders.js'
import eventRoutes from './events.js'

/** The portal API: every route in this scope needs the database reachable and a valid access token. */
const portalApi: FastifyPluginAsync = async (fastify) => {
  fastify.addHook('onRequest', fastify.requireDatabase)
  fastify.addHook('onRequest', fastify.authenticate)
  await fastify.register(invoiceRoutes)
  await fastify.register(orderRoutes)
  await fastify.register(eventRoutes)
}

export default portalApi

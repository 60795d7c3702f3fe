import type { FastifyPluginAsync } from 'fastify'
import invoiceRoutes from './invoices.js'

/** The portal API: every route in this scope needs a valid access token. */
const portalApi: FastifyPluginAsync = async (fastify) => {
  fastify.addHook('onRequest', fastify.authenticate)
  await fastify.register(invoiceRoutes)
}

export default portalApi

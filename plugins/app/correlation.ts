import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { CORRELATION_HEADER } from '../../lib/request-log.js'

/** Every response, errors and 404s included, carries the request's correlation id. */
async function correlation (fastify: FastifyInstance) {
  fastify.addHook('onRequest', async (request, reply) => {
    reply.header(CORRELATION_HEADER, request.id)
  })
}

export default fp(correlation, { name: 'correlation', fastify: '5.x' })

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { CORRELATION_HEADER } from '../../lib/request-log.js'

/** Every response, errors and 404s included, carries the request's correlation id. */
async function correlation (fastify: FastifyInstance) {
  // Callback-style: this runs on every request, probes included, and a promise per call shows.
  fastify.addHook('onRequest', (request, reply, done) => {
    reply.header(CORRELATION_HEADER, request.id)
    done()
  })
}

export default fp(correlation, { name: 'correlation', fastify: '5.x' })

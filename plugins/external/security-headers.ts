import fp from 'fastify-plugin'
import fastifyHelmet from '@fastify/helmet'
import fastifyCors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'

async function securityHeaders (fastify: FastifyInstance) {
  // The API UI sets its own content security policy for its pages (staticCSP in the swagger plugin).
  await fastify.register(fastifyHelmet, { global: true })
  // Unset CORS_ORIGIN means no cross-origin access at all.
  await fastify.register(fastifyCors, {
    origin: fastify.config.CORS_ORIGIN ?? false,
    credentials: false,
    methods: ['GET', 'POST'],
    allowedHeaders: ['authorization', 'content-type', 'x-correlation-id', 'last-event-id'],
    exposedHeaders: ['x-correlation-id', 'retry-after']
  })
}

export default fp(securityHeaders, { name: 'security-headers', fastify: '5.x', decorators: { fastify: ['config'] } })

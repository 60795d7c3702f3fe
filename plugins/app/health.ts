import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { HealthCheckRegistry } from '../../lib/health-checks.js'

export interface Lifecycle {
  /** True from the shutdown signal on: readiness answers 503 while requests drain. */
  draining: boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The checks behind `GET /health`: the database and the cache. */
    coreHealth: HealthCheckRegistry
    /** The checks behind `GET /auth/health-check`: the database and each upstream. */
    integrationHealth: HealthCheckRegistry
    lifecycle: Lifecycle
  }
}

async function health (fastify: FastifyInstance) {
  const { HEALTH_CHECK_TIMEOUT_MS, HEALTH_CHECK_CACHE_MS } = fastify.config
  const options = { timeoutMs: HEALTH_CHECK_TIMEOUT_MS, reuseMs: HEALTH_CHECK_CACHE_MS }
  fastify.decorate('coreHealth', new HealthCheckRegistry(options))
  fastify.decorate('integrationHealth', new HealthCheckRegistry(options))
  fastify.decorate('lifecycle', { draining: false })
  fastify.addHook('preClose', async () => { fastify.lifecycle.draining = true })
  // While draining, keep-alive connections are closed after their response, or the listener
  // would wait on them forever.
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    if (fastify.lifecycle.draining) reply.header('connection', 'close')
    done(null, payload)
  })
}

export default fp(health, { name: 'health', fastify: '5.x', decorators: { fastify: ['config'] } })

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { HealthCheckRegistry, coreHealthOf, type CoreHealth } from '../../lib/health-checks.js'

/** What the health endpoints read: the two sets of checks, and whether this instance is shutting down. */
export interface Health {
  /** The checks behind `GET /health`: the database's and Redis's (named `database` and `cache`). */
  readonly core: HealthCheckRegistry
  /** The checks behind `GET /auth/health-check`: the database, each upstream and the event subscription. */
  readonly integrations: HealthCheckRegistry
  /** True from the shutdown signal on: readiness answers 503 while requests drain. */
  draining: boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    health: Health
  }
}

declare module './monitoring/index.js' {
  interface MonitoringParts {
    core: CoreHealth
  }
}

async function health (fastify: FastifyInstance) {
  const { HEALTH_CHECK_TIMEOUT_MS, HEALTH_CHECK_CACHE_MS, INTEGRATION_CHECK_CACHE_MS } = fastify.config
  const coreChecks = new HealthCheckRegistry({ timeoutMs: HEALTH_CHECK_TIMEOUT_MS, reuseMs: HEALTH_CHECK_CACHE_MS })
  fastify.decorate('health', {
    core: coreChecks,
    // Each run costs CRM API calls: an anonymous caller polling it must not spend the org's daily quota.
    integrations: new HealthCheckRegistry({ timeoutMs: HEALTH_CHECK_TIMEOUT_MS, reuseMs: INTEGRATION_CHECK_CACHE_MS }),
    draining: false
  } satisfies Health)
  fastify.addHook('preClose', async () => { fastify.health.draining = true })
  // While draining, keep-alive connections are closed after their response, or the listener
  // would wait on them forever.
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    if (fastify.health.draining) reply.header('connection', 'close')
    done(null, payload)
  })

  fastify.monitoring.register('core', {
    description: 'the core health checks',
    read: async () => coreHealthOf(await coreChecks.run()),
    measures: {
      core_status: (core) => ({ value: Object.values(core.checks).filter((status) => status === 'fail').length })
    },
    metrics: [{
      name: 'portal_bff_health_check_up',
      help: 'Core health checks of GET /health: 1 ok, 0 fail',
      type: 'gauge',
      samples: (core) =>
        Object.entries(core.checks).map(([check, status]) => ({ labels: { check }, value: status === 'ok' ? 1 : 0 }))
    }]
  })
}

export default fp(health, {
  name: 'health',
  fastify: '5.x',
  dependencies: ['monitoring'],
  decorators: { fastify: ['config'] }
})

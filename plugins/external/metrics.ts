import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { ServiceMetrics } from '../app/monitoring/metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** This instance's prom-client registry and the recorders of the windowed measures. */
    metrics: ServiceMetrics
  }
}

/** prom-client, loaded first so the plugins that time things (postgres, cache, upstreams) can feed it. */
async function metrics (fastify: FastifyInstance) {
  if (fastify.hasDecorator('metrics')) throw new Error('The metrics plugin is already registered')
  const serviceMetrics = new ServiceMetrics()
  fastify.decorate('metrics', serviceMetrics)
  fastify.decorate('requestObserver', (request, reply, durationMs) => {
    serviceMetrics.observeHttpRequest(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode, durationMs)
  })
}

export default fp(metrics, { name: 'metrics', fastify: '5.x' })

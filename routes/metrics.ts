import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { opsUnauthorizedResponse, unexpectedErrorResponse } from '../schemas/error.js'

const metricsRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.get('/metrics', {
    config: { probe: true },
    onRequest: fastify.requireOpsToken,
    schema: {
      operationId: 'getMetrics',
      tags: ['metrics'],
      security: [{ opsToken: [] }],
      summary: 'Prometheus metrics: the measures of the monitoring thresholds, and the process',
      description: 'Prometheus text format 0.0.4. Live values are read at scrape time; the monitoring rules are in deploy/monitoring/prometheus/alerts.yml.',
      // Only the metrics are text; a refusal or a failure is the JSON error body, as everywhere.
      response: { 200: { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: Type.String() } } }, ...opsUnauthorizedResponse, ...unexpectedErrorResponse }
    }
  }, async (_request, reply) => {
    const text = await fastify.metrics.text()
    return reply.type(fastify.metrics.contentType).send(text)
  })
}

export default metricsRoutes

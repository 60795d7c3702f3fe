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
      produces: ['text/plain'],
      response: { 200: Type.String({ description: 'Prometheus text exposition format' }), ...opsUnauthorizedResponse, ...unexpectedErrorResponse }
    }
  }, async (_request, reply) => {
    const text = await fastify.metrics.text()
    return reply.type(fastify.metrics.contentType).send(text)
  })
}

export default metricsRoutes

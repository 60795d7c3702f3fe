import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { opsUnauthorizedResponse, unexpectedErrorResponse } from '../schemas/error.js'
import { ServiceMetrics, acceptsOpenMetrics } from '../plugins/app/monitoring/metrics.js'

const metricsRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.get('/metrics', {
    config: { probe: true },
    onRequest: fastify.requireOpsToken,
    schema: {
      operationId: 'getMetrics',
      tags: ['metrics'],
      security: [{ opsToken: [] }],
      summary: 'Prometheus metrics: the measures of the monitoring thresholds, and the process',
      description: 'Prometheus text format 0.0.4; OpenMetrics 1.0.0 when the Accept header asks for it first (as Prometheus does), where the request-duration histogram carries the trace of a sampled request as its exemplar (`trace_id`, `span_id`). Live values are read at scrape time; the monitoring rules are in deploy/monitoring/prometheus/alerts.yml.',
      // Only the metrics are text; a refusal or a failure is the JSON error body, as everywhere.
      response: {
        200: {
          description: 'Prometheus text exposition format, or OpenMetrics',
          content: {
            'text/plain': { schema: Type.String() },
            'application/openmetrics-text': { schema: Type.String() }
          }
        },
        ...opsUnauthorizedResponse,
        ...unexpectedErrorResponse
      }
    }
  }, async (request, reply) => {
    if (acceptsOpenMetrics(request.headers.accept)) {
      return reply.type(ServiceMetrics.OPENMETRICS_CONTENT_TYPE).send(await fastify.metrics.openMetricsText())
    }
    return reply.type(fastify.metrics.contentType).send(await fastify.metrics.text())
  })
}

export default metricsRoutes

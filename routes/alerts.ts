import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { PRIORITIES } from '../plugins/app/monitoring/alerts.js'
import { AlertsReport, alertSchemas } from '../schemas/monitoring.js'
import { opsUnauthorizedResponse, unexpectedErrorResponse } from '../schemas/error.js'

const alertRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of alertSchemas(fastify.monitoring.rows.map(({ measure }) => measure))) fastify.addSchema(schema)

  fastify.get('/health/alerts', {
    config: { probe: true },
    onRequest: fastify.requireOpsToken,
    schema: {
      operationId: 'getAlerts',
      tags: ['alerts'],
      security: [{ opsToken: [] }],
      summary: 'Every measure of the monitoring thresholds with its value, unit and level, and the overall level',
      description: 'One row per row of the specification\'s thresholds table. 200 whatever the level: the level is in the body. A row past a threshold names the priority its level routes to (P1 and P2 page, P3 and P4 open a ticket).',
      response: {
        200: Type.Ref(AlertsReport, { description: 'every measure with its level, and the overall level' }),
        ...opsUnauthorizedResponse,
        ...unexpectedErrorResponse
      }
    }
  }, async () => {
    const { snapshot, judgement } = await fastify.monitoring.evaluate()
    return { timestamp: snapshot.timestamp, level: judgement.level, alerts: judgement.alerts, priorities: PRIORITIES }
  })
}

export default alertRoutes

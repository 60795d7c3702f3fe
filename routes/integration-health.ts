import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { CheckResult } from '../lib/health-checks.js'
import { EventsCheck, IntegrationCheck, integrationHealthReport } from '../schemas/integrations.js'
import { unexpectedErrorResponse } from '../schemas/error.js'
import type { UpstreamsOptions } from '../plugins/app/upstreams/index.js'

const NOT_REGISTERED: CheckResult = { status: 'fail', latencyMs: 0, error: 'upstream_error' }
// Not a failure (the deployment chose it), yet never `ok`: a disabled subscription receives no event.
const EVENTS_DISABLED = { status: 'disabled', latencyMs: 0 } as const

const listed = new Intl.ListFormat('en-GB', { type: 'conjunction' })

const integrationHealthRoutes: FastifyPluginAsyncTypebox<UpstreamsOptions> = async (fastify, { upstreams }) => {
  const IntegrationHealthReport = integrationHealthReport(upstreams.map(({ name }) => name))
  fastify.addSchema(IntegrationCheck)
  fastify.addSchema(EventsCheck)
  fastify.addSchema(IntegrationHealthReport)

  fastify.get('/auth/health-check', {
    config: { probe: true },
    schema: {
      operationId: 'getIntegrationHealth',
      tags: ['health'],
      security: [],
      summary: `Integration health: ${listed.format(['database', ...upstreams.map(({ description }) => description)])}`,
      description: 'Each check is bounded by the health-check timeout; a failing check names a short failure class; the platform-event subscription is `disabled` (which fails nothing) while CRM_EVENTS_ENABLED is not `true`. A finished run is reused for `INTEGRATION_CHECK_CACHE_MS` (30 s by default): one run costs the CRM one REST call (`limits`), so polling this costs the org at most 2,880 API calls a day per instance, whoever polls.',
      response: {
        200: Type.Ref(IntegrationHealthReport, { description: 'every integration answers' }),
        503: Type.Ref(IntegrationHealthReport, { description: 'one or more integrations fail' }),
        ...unexpectedErrorResponse
      }
    }
  }, async (_request, reply) => {
    const results = await fastify.health.integrations.run()
    const checks = {
      database: results.database ?? NOT_REGISTERED,
      ...Object.fromEntries(upstreams.map(({ name }) => [name, results[name] ?? NOT_REGISTERED])),
      events: results.events ?? (fastify.platformEvents.subscription.enabled ? NOT_REGISTERED : EVENTS_DISABLED)
    }
    const ok = Object.values(checks).every((check) => check.status !== 'fail')
    return reply.code(ok ? 200 : 503).send({
      status: ok ? 'ok' : 'degraded',
      timestamp: new Date().toISOString(),
      checks
    })
  })
}

export default integrationHealthRoutes

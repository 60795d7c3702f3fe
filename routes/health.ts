import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { CheckStatus, CoreHealthReport, LivenessReport, ReadinessReport } from '../schemas/health.js'

const probe = { probe: true }

const healthRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [CheckStatus, CoreHealthReport, ReadinessReport, LivenessReport]) fastify.addSchema(schema)

  // One report per run of the checks: a run is shared by every probe for up to a second.
  const reports = new WeakMap<object, CoreHealthReport>()

  async function coreHealth (): Promise<CoreHealthReport> {
    const results = await fastify.coreHealth.run()
    let report = reports.get(results)
    if (report === undefined) {
      const checks = {
        database: results.database?.status ?? 'fail',
        cache: results.cache?.status ?? 'fail'
      }
      report = { status: checks.database === 'ok' && checks.cache === 'ok' ? 'ok' : 'degraded', checks }
      reports.set(results, report)
    }
    return report
  }

  fastify.get('/health', {
    config: probe,
    schema: {
      tags: ['health'],
      summary: 'Core health: database and cache',
      description: 'Polled every 30 s. Answers within the health-check timeout even when a dependency hangs; results are shared by concurrent callers and reused for at most 1 s.',
      response: {
        200: Type.Ref(CoreHealthReport, { description: 'every check is ok' }),
        503: Type.Ref(CoreHealthReport, { description: 'one or more checks fail' })
      }
    }
  }, async (_request, reply) => {
    const report = await coreHealth()
    return reply.code(report.status === 'ok' ? 200 : 503).send(report)
  })

  fastify.get('/health/live', {
    config: probe,
    schema: {
      tags: ['health'],
      summary: 'Liveness: the process serves requests; touches no dependency',
      response: { 200: Type.Ref(LivenessReport) }
    }
  }, async () => ({ status: 'ok' as const }))

  fastify.get('/health/ready', {
    config: probe,
    schema: {
      tags: ['health'],
      summary: 'Readiness: like /health, and 503 while shutting down',
      response: {
        200: Type.Ref(ReadinessReport, { description: 'ready for traffic' }),
        503: Type.Ref(ReadinessReport, { description: 'a check fails or the service is draining' })
      }
    }
  }, async (_request, reply) => {
    const report = await coreHealth()
    if (fastify.lifecycle.draining) return reply.code(503).send({ ...report, status: 'draining' as const })
    return reply.code(report.status === 'ok' ? 200 : 503).send(report)
  })
}

export default healthRoutes

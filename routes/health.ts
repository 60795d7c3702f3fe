import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply } from 'fastify'
import type { CheckResult } from '../lib/health-checks.js'
import { coreHealthOf } from '../lib/health-checks.js'
import { CheckStatus, CoreHealthReport, LivenessReport, ReadinessReport } from '../schemas/health.js'
import { unexpectedErrorResponse } from '../schemas/error.js'

const probe = { probe: true }

const healthRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [CheckStatus, CoreHealthReport, ReadinessReport, LivenessReport]) fastify.addSchema(schema)

  // One report per run of the checks: a run is shared by every probe for up to a second.
  let reportedResults: Record<string, CheckResult> | undefined
  let report: CoreHealthReport | undefined

  function reportOf (results: Record<string, CheckResult>): CoreHealthReport {
    if (results !== reportedResults || report === undefined) {
      report = coreHealthOf(results)
      reportedResults = results
    }
    return report
  }

  function sendReport (reply: FastifyReply, results: Record<string, CheckResult>): void {
    const coreReport = reportOf(results)
    reply.code(coreReport.status === 'ok' ? 200 : 503).send(coreReport)
  }

  fastify.get('/health', {
    config: probe,
    schema: {
      operationId: 'getHealth',
      tags: ['health'],
      security: [],
      summary: 'Core health: database and cache',
      description: 'Polled every 30 s. Answers within the health-check timeout even when a dependency hangs; results are shared by concurrent callers and reused for at most 1 s.',
      response: {
        200: Type.Ref(CoreHealthReport, { description: 'every check is ok' }),
        503: Type.Ref(CoreHealthReport, { description: 'one or more checks fail' }),
        ...unexpectedErrorResponse
      }
    }
  }, (_request, reply) => {
    // The uptime monitor and load balancers poll this: while a run may be reused, answer at once,
    // without the promises and microtask turns of waiting for a run that is already there.
    const reusable = fastify.health.core.reusable
    if (reusable !== undefined) {
      sendReport(reply, reusable)
      return
    }
    return fastify.health.core.run().then((results) => { sendReport(reply, results) })
  })

  fastify.get('/health/live', {
    config: probe,
    schema: {
      operationId: 'getLiveness',
      tags: ['health'],
      security: [],
      summary: 'Liveness: the process serves requests; touches no dependency',
      response: { 200: Type.Ref(LivenessReport, { description: 'the process serves' }), ...unexpectedErrorResponse }
    }
  }, async () => ({ status: 'ok' as const }))

  fastify.get('/health/ready', {
    config: probe,
    schema: {
      operationId: 'getReadiness',
      tags: ['health'],
      security: [],
      summary: 'Readiness: 503 while shutting down; the checks of /health are reported, not judged',
      response: {
        200: Type.Ref(ReadinessReport, {
          description: 'ready for traffic; `degraded` when a dependency shared by every instance fails'
        }),
        503: Type.Ref(ReadinessReport, { description: 'the service is draining' }),
        ...unexpectedErrorResponse
      }
    }
  }, async (_request, reply) => {
    // 503 only while draining; the last finished run's checks are reported, never waited for.
    // Why: docs/decisions/0041-readiness-and-shared-dependencies.md
    const { core } = fastify.health
    let results = core.reusable
    if (results === undefined) {
      const running = core.run()
      results = core.latest ?? await running
    }
    if (fastify.health.draining) return reply.code(503).send({ ...reportOf(results), status: 'draining' as const })
    return reply.code(200).send(reportOf(results))
  })
}

export default healthRoutes

import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { UpstreamQueue } from '../plugins/app/upstreams/queues.js'
import type { UpstreamParts, UpstreamsOptions } from '../plugins/app/upstreams/index.js'
import { usageReport } from '../integrations/crm/daily-usage.js'
import { levelOf } from '../plugins/app/monitoring/levels.js'
import { parkedEventRoutes } from '../plugins/app/platform-events/index.js'
import {
  CrmQueueDetail, CrmQueueReport, QueueDetail, queueSchemas, pendingOrdersReport, queuesReport
} from '../schemas/queues.js'
import { unexpectedErrorResponse } from '../schemas/error.js'

const probe = { probe: true }

/** `crm` → `Crm`, for an operation's id. */
const capitalized = (name: string) => `${name.charAt(0).toUpperCase()}${name.slice(1)}`

const queueRoutes: FastifyPluginAsyncTypebox<UpstreamsOptions> = async (fastify, { upstreams }) => {
  for (const schema of queueSchemas) fastify.addSchema(schema)
  // The events section counts them; the operator's hand on them sits beside it, behind OPS_TOKEN.
  await fastify.register(parkedEventRoutes)

  const dailyUsage = async () => usageReport(await fastify.upstreams.crm.dailyUsage.read())
  const jobReport = () => fastify.orders.jobs.report().catch(() => null)
  // By name: a test's registry adds upstreams whose names the decorator's type does not know.
  const parts = new Map<string, UpstreamParts>(Object.entries(fastify.upstreams))
  const queues = upstreams.flatMap(({ name, title }) => {
    const queue = parts.get(name)?.queue
    return queue === undefined ? [] : [{ name, title, queue }]
  })
  // The CRM's queue reports the CRM's daily API usage beside its own measures.
  const crmReport = {
    report: CrmQueueReport,
    detail: CrmQueueDetail,
    summary: 'CRM queue details, with the daily API usage against its limit'
  }
  const QueuesReport = queuesReport(queues.map(({ name }) => name), { crm: crmReport.report })
  fastify.addSchema(QueuesReport)

  function detail (queue: UpstreamQueue) {
    return {
      name: queue.name,
      timestamp: new Date().toISOString(),
      health: queue.health(),
      level: queue.level(),
      metrics: queue.metrics(),
      recentFailedRequests: queue.recentFailures(),
      settings: queue.settings,
      thresholds: queue.thresholds
    }
  }

  fastify.get('/health/queues', {
    config: probe,
    schema: {
      operationId: 'getQueues',
      tags: ['health'],
      security: [],
      summary: `Queue metrics of the upstream queues (${queues.map(({ title }) => title).join(', ')}), and the CRM daily API usage`,
      description: 'Counters are cumulative; averages are in milliseconds over the recent window; `health` is judged from the monitoring thresholds.',
      response: {
        200: Type.Ref(QueuesReport, { description: 'the upstream queues, the job queue and the event subscription' }),
        ...unexpectedErrorResponse
      }
    }
  }, async () => {
    const [{ used, limit }, jobs, holder, parked, orders] = await Promise.all([
      dailyUsage(),
      jobReport(),
      fastify.platformEvents.subscription.holder().catch(() => null),
      fastify.platformEvents.parked.count().catch(() => null),
      fastify.orders.pending.count().then(pendingOrdersReport, () => null)
    ])
    const reports = Object.fromEntries(
      queues.map(({ name, queue }) => [name, { health: queue.health(), metrics: queue.metrics() }])
    )
    return {
      timestamp: new Date().toISOString(),
      ...reports,
      crm: { ...reports.crm!, dailyUsage: { used, limit } },
      jobs,
      events: {
        health: fastify.platformEvents.subscription.health(holder),
        ...fastify.platformEvents.subscription.stats(),
        parked,
        holder:
          holder === null
            ? null
            : {
                heldHere: holder.instance === fastify.platformEvents.subscription.instance,
                state: holder.state,
                lastEventAt: holder.lastEventAt,
                replayId: holder.replayId,
                reportedAt: holder.reportedAt
              }
      },
      orders
    }
  })

  for (const { name, title, queue } of queues) {
    const crm = name === 'crm'
    fastify.get(`/health/queues/${name}`, {
      config: probe,
      schema: {
        operationId: `get${capitalized(name)}Queue`,
        tags: ['health'],
        security: [],
        summary: crm ? crmReport.summary : `${capitalized(title)} queue details: metrics, settings and current alert level`,
        response: { 200: Type.Ref(crm ? crmReport.detail : QueueDetail, { description: `the ${title} queue${crm ? ' and its daily usage' : ''}` }), ...unexpectedErrorResponse }
      }
    }, async () => {
      if (!crm) return detail(queue)
      const usage = await dailyUsage()
      return { ...detail(queue), dailyUsage: { ...usage, level: levelOf('crm_daily_usage', usage.percent) } }
    })
  }
}

export default queueRoutes

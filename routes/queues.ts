import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { UpstreamQueue } from '../plugins/app/request-queues.js'
import { usageReport } from '../plugins/app/upstreams.js'
import { levelOf } from '../plugins/app/monitoring/levels.js'
import { subscriptionHealth } from '../plugins/app/platform-events/holder-state.js'
import { pendingOrdersReport } from '../plugins/app/orders/pending-orders.js'
import { CrmQueueDetail, QueueDetail, QueuesReport, queueSchemas } from '../schemas/queues.js'
import { unexpectedErrorResponse } from '../schemas/error.js'
import parkedEventRoutes from './parked-events.js'

const probe = { probe: true }

const queueRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of queueSchemas) fastify.addSchema(schema)
  // The events section counts them; the operator's hand on them sits beside it, behind OPS_TOKEN.
  await fastify.register(parkedEventRoutes)

  const dailyUsage = async () => usageReport(await fastify.crmUsage.read())
  const jobReport = () => fastify.jobQueue.report().catch(() => null)

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
      summary: 'Queue metrics of both upstream queues, and the CRM daily API usage',
      description: 'Counters are cumulative; averages are in milliseconds over the recent window; `health` is judged from the monitoring thresholds.',
      response: { 200: Type.Ref(QueuesReport, { description: 'both upstream queues, the job queue and the event subscription' }), ...unexpectedErrorResponse }
    }
  }, async () => {
    const [{ used, limit }, jobs, holder, parked, orders] = await Promise.all([
      dailyUsage(), jobReport(), fastify.eventSubscription.holder().catch(() => null), fastify.parkedEvents.count().catch(() => null),
      fastify.pendingOrders.count().then(pendingOrdersReport, () => null)
    ])
    return {
      timestamp: new Date().toISOString(),
      billing: { health: fastify.billingQueue.health(), metrics: fastify.billingQueue.metrics() },
      crm: { health: fastify.crmQueue.health(), metrics: fastify.crmQueue.metrics(), dailyUsage: { used, limit } },
      jobs,
      events: {
        health: subscriptionHealth(fastify.config.CRM_EVENTS_ENABLED, holder),
        ...fastify.eventSubscription.stats(),
        parked,
        holder: holder === null ? null : { heldHere: holder.instance === fastify.eventSubscription.instance, state: holder.state, lastEventAt: holder.lastEventAt, replayId: holder.replayId, reportedAt: holder.reportedAt }
      },
      orders
    }
  })

  fastify.get('/health/queues/billing', {
    config: probe,
    schema: {
      operationId: 'getBillingQueue',
      tags: ['health'],
      security: [],
      summary: 'Billing queue details: metrics, settings and current alert level',
      response: { 200: Type.Ref(QueueDetail, { description: 'the billing queue' }), ...unexpectedErrorResponse }
    }
  }, async () => detail(fastify.billingQueue))

  fastify.get('/health/queues/crm', {
    config: probe,
    schema: {
      operationId: 'getCrmQueue',
      tags: ['health'],
      security: [],
      summary: 'CRM queue details, with the daily API usage against its limit',
      response: { 200: Type.Ref(CrmQueueDetail, { description: 'the CRM queue and its daily usage' }), ...unexpectedErrorResponse }
    }
  }, async () => {
    const usage = await dailyUsage()
    return { ...detail(fastify.crmQueue), dailyUsage: { ...usage, level: levelOf('crm_daily_usage', usage.percent) } }
  })
}

export default queueRoutes

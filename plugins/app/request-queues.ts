import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { ProductUpstream } from '../../integrations/registry.js'
import { RequestQueue, type QueueMetrics } from '../../lib/request-queue.js'
import type { Sample } from './monitoring/metrics.js'
import type { UpstreamsOptions } from './upstreams.js'
import { threshold, type MeasureName } from './monitoring/thresholds.js'
import { healthOf, levelOf, worstLevel, type Level, type QueueHealth } from './monitoring/levels.js'

/**
 * The specification states thresholds for the billing queue; the CRM queue, whose metrics have
 * the same shape, is judged by the same rows.
 */
const QUEUE_THRESHOLDS = { queueSize: 'billing_queue_size', failedRequests: 'billing_failed_requests' } as const satisfies Record<string, MeasureName>

/** A request queue to one upstream, judged against the monitoring thresholds. */
export class UpstreamQueue extends RequestQueue {
  /** The warning and critical thresholds this queue's health is judged by. */
  get thresholds (): Record<keyof typeof QUEUE_THRESHOLDS, { warning: number, critical: number }> {
    const limits = (measure: MeasureName) => {
      const { warning, critical } = threshold(measure)
      return { warning, critical }
    }
    return { queueSize: limits(QUEUE_THRESHOLDS.queueSize), failedRequests: limits(QUEUE_THRESHOLDS.failedRequests) }
  }

  level (): Level {
    return worstLevel([levelOf(QUEUE_THRESHOLDS.queueSize, this.metrics().queueSize), levelOf(QUEUE_THRESHOLDS.failedRequests, this.recentFailures())])
  }

  health (): QueueHealth {
    return healthOf(this.level())
  }
}

/** A queue's report: its health, the specification's metrics, and the failures its health is judged on. */
export interface QueueSnapshot {
  health: QueueHealth
  metrics: QueueMetrics
  recentFailedRequests: number
}

function snapshotOf (queue: UpstreamQueue): QueueSnapshot {
  return { health: queue.health(), metrics: queue.metrics(), recentFailedRequests: queue.recentFailures() }
}

/** The upstreams whose calls wait in a queue. */
type QueuedName = Extract<ProductUpstream, { queue: object }>['name']

/** Each queue under its upstream's name and `Queue`: `billingQueue`. */
type UpstreamQueues = { readonly [Name in QueuedName as `${Name}Queue`]: UpstreamQueue }

declare module 'fastify' {
  interface FastifyInstance extends UpstreamQueues {}
}

type QueueReports = Record<QueuedName, QueueSnapshot>

declare module './monitoring/index.js' {
  interface MonitoringParts {
    queues: QueueReports
  }
}

/** A gauge or counter with one sample per queue, labelled with its name. */
function perQueue (name: string, help: string, type: 'gauge' | 'counter', value: (queue: QueueSnapshot) => number) {
  return { name, help, type, samples: (queues: QueueReports): Sample[] => Object.entries(queues).map(([queue, report]) => ({ labels: { queue }, value: value(report) })) }
}

async function requestQueues (fastify: FastifyInstance, { upstreams }: UpstreamsOptions) {
  const { config } = fastify
  const queues = upstreams.flatMap(({ name, queue }) => queue === undefined
    ? []
    : [new UpstreamQueue({ name, concurrency: config[queue.concurrency], timeoutMs: config[queue.timeoutMs], maxSize: config[queue.maxSize], windowMs: config.QUEUE_HEALTH_WINDOW_MS })])
  for (const queue of queues) fastify.decorate(`${queue.name}Queue`, queue)
  fastify.addHook('onClose', async () => {
    await Promise.all(queues.map((queue) => queue.drain()))
  })

  const window = 'within QUEUE_HEALTH_WINDOW_MS'
  fastify.monitoring.register('queues', {
    description: 'the request queues',
    read: () => Object.fromEntries(queues.map((queue) => [queue.name, snapshotOf(queue)])) as QueueReports,
    measures: {
      billing_queue_size: ({ billing }) => ({ value: billing.metrics.queueSize }),
      billing_failed_requests: ({ billing }) => ({ value: billing.recentFailedRequests })
    },
    metrics: [
      perQueue('portal_bff_queue_size', 'Requests waiting in the upstream request queue', 'gauge', (queue) => queue.metrics.queueSize),
      perQueue('portal_bff_queue_pending_requests', 'Requests of the upstream request queue in flight', 'gauge', (queue) => queue.metrics.pendingRequests),
      perQueue('portal_bff_queue_recent_failed_requests', `Failed requests of the upstream request queue ${window}, which its health is judged on`, 'gauge', (queue) => queue.recentFailedRequests),
      perQueue('portal_bff_queue_requests_total', 'Requests seen by the upstream request queue', 'counter', (queue) => queue.metrics.totalRequests),
      perQueue('portal_bff_queue_requests_completed_total', 'Requests completed by the upstream request queue', 'counter', (queue) => queue.metrics.completedRequests),
      perQueue('portal_bff_queue_requests_failed_total', 'Requests failed in the upstream request queue', 'counter', (queue) => queue.metrics.failedRequests),
      perQueue('portal_bff_queue_average_wait_seconds', `Average wait in the upstream request queue ${window}`, 'gauge', (queue) => queue.metrics.averageWaitTime / 1000),
      perQueue('portal_bff_queue_average_execution_seconds', `Average execution time of upstream requests ${window}`, 'gauge', (queue) => queue.metrics.averageExecutionTime / 1000)
    ]
  })
}

export default fp(requestQueues, { name: 'request-queues', fastify: '5.x', dependencies: ['monitoring'], decorators: { fastify: ['config'] } })

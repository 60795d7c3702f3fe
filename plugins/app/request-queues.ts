import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { RequestQueue, type RequestQueueOptions } from '../../lib/request-queue.js'
import { healthOf, levelOf, threshold, worstLevel, type Level, type MeasureName, type QueueHealth } from './monitoring/thresholds.js'

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

declare module 'fastify' {
  interface FastifyInstance {
    billingQueue: UpstreamQueue
    crmQueue: UpstreamQueue
  }
}

async function requestQueues (fastify: FastifyInstance) {
  const { config } = fastify
  const queue = (options: Omit<RequestQueueOptions, 'windowMs'>) => new UpstreamQueue({ ...options, windowMs: config.QUEUE_HEALTH_WINDOW_MS })
  const billingQueue = queue({ name: 'billing', concurrency: config.BILLING_QUEUE_CONCURRENCY, timeoutMs: config.BILLING_QUEUE_TIMEOUT_MS, maxSize: config.BILLING_QUEUE_MAX_SIZE })
  const crmQueue = queue({ name: 'crm', concurrency: config.CRM_QUEUE_CONCURRENCY, timeoutMs: config.CRM_QUEUE_TIMEOUT_MS, maxSize: config.CRM_QUEUE_MAX_SIZE })
  fastify.decorate('billingQueue', billingQueue)
  fastify.decorate('crmQueue', crmQueue)
  fastify.addHook('onClose', async () => {
    await Promise.all([billingQueue.drain(), crmQueue.drain()])
  })
}

export default fp(requestQueues, { name: 'request-queues', fastify: '5.x', decorators: { fastify: ['config'] } })

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { RequestQueue } from '../../lib/request-queue.js'

declare module 'fastify' {
  interface FastifyInstance {
    billingQueue: RequestQueue
    crmQueue: RequestQueue
  }
}

/**
 * One request queue per upstream. The seed states thresholds for the billing queue; the CRM
 * queue, whose metrics have the same shape, is judged by the same rows.
 */
async function requestQueues (fastify: FastifyInstance) {
  const { config } = fastify
  const thresholds = { queueSize: 'billing_queue_size', failedRequests: 'billing_failed_requests' } as const
  const queues = {
    billingQueue: new RequestQueue({
      name: 'billing',
      concurrency: config.BILLING_QUEUE_CONCURRENCY,
      timeoutMs: config.BILLING_QUEUE_TIMEOUT_MS,
      maxSize: config.BILLING_QUEUE_MAX_SIZE,
      windowMs: config.QUEUE_HEALTH_WINDOW_MS,
      thresholds
    }),
    crmQueue: new RequestQueue({
      name: 'crm',
      concurrency: config.CRM_QUEUE_CONCURRENCY,
      timeoutMs: config.CRM_QUEUE_TIMEOUT_MS,
      maxSize: config.CRM_QUEUE_MAX_SIZE,
      windowMs: config.QUEUE_HEALTH_WINDOW_MS,
      thresholds
    })
  }
  fastify.decorate('billingQueue', queues.billingQueue)
  fastify.decorate('crmQueue', queues.crmQueue)
  fastify.addHook('onClose', async () => {
    await Promise.all(Object.values(queues).map((queue) => queue.drain()))
  })
}

export default fp(requestQueues, { name: 'request-queues', fastify: '5.x', decorators: { fastify: ['config'] } })

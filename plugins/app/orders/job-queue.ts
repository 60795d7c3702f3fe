import type { FastifyInstance } from 'fastify'
import type { Queue } from 'bullmq'
import { abortable } from '../../../lib/abortable.js'
import { SpanKind, currentTraceparent, inSpan } from '../../../lib/tracing.js'
import type { MonitoringSource } from '../monitoring/index.js'
import { healthOf, levelOf, worstLevel, type QueueHealth } from '../monitoring/levels.js'
import { JOB_STATES, type JobCounts } from './provisioning.js'
import { JOB_MESSAGING, PROVISIONING_QUEUE, jobIdOf, type ProvisioningJob } from './provisioning-job.js'
import { ProvisioningWorker } from './provisioning-worker.js'
import type { OrderStore } from './store.js'
import type { OrderStatusChanges } from './status-changes.js'

export interface JobQueueBounds {
  /** How long a hand-off waits for Redis to take its job: long enough to ride out a brief reconnect. */
  enqueueTimeoutMs: number
  /** How long a report (`/health/queues`, `/health/alerts`) waits for the counts: one command's bound. */
  countsTimeoutMs: number
  /** The recent window failed jobs are judged over (QUEUE_HEALTH_WINDOW_MS, as the request queues' failures). */
  failureWindowMs: number
}

export class ProvisioningJobQueue {
  // BullMQ's producer connection has no command timeout of its own (it waits for Redis to come
  // back), so every call here carries its own bound.
  constructor (private readonly queue: Queue<ProvisioningJob>, private readonly bounds: JobQueueBounds) {}

  /** Resolves once the job is durably in Redis; rejects when Redis does not take it in time. */
  async enqueue (crmOrderId: string): Promise<void> {
    const jobId = jobIdOf(crmOrderId)
    // A producer span (messaging conventions) under the work that queues the job; the job links to it.
    await inSpan(`send ${PROVISIONING_QUEUE}`, {
      kind: SpanKind.PRODUCER,
      attributes: {
        ...JOB_MESSAGING,
        'messaging.operation.type': 'send',
        'messaging.message.id': jobId,
        'crm.order_id': crmOrderId
      }
    }, async () => {
      const traceparent = currentTraceparent()
      const data: ProvisioningJob = traceparent === undefined ? { crmOrderId } : { crmOrderId, traceparent }
      await abortable(this.queue.add('provision', data, { jobId }), AbortSignal.timeout(this.bounds.enqueueTimeoutMs))
    })
  }

  async counts (): Promise<JobCounts> {
    const [counts, recentFailed] = await abortable(Promise.all([
      this.queue.getJobCounts(...JOB_STATES),
      this.#recentlyFailed()
    ]), AbortSignal.timeout(this.bounds.countsTimeoutMs))
    return {
      waiting: counts.waiting ?? 0,
      active: counts.active ?? 0,
      delayed: counts.delayed ?? 0,
      failed: counts.failed ?? 0,
      completed: counts.completed ?? 0,
      recentFailed
    }
  }

  /**
   * Jobs that failed for good within the window, for every instance at once: BullMQ scores its
   * failed set by the time each job failed. The set itself keeps failed jobs 30 days for
   * inspection, so judging its size would keep the queue degraded for a month after one incident.
   */
  async #recentlyFailed (): Promise<number> {
    const client = await this.queue.client
    return await client.zcount(this.queue.toKey('failed'), Date.now() - this.bounds.failureWindowMs, '+inf')
  }

  /** The counts and the queue's health, judged on the waiting jobs and the recent failures. */
  async report (): Promise<JobCounts & { health: QueueHealth }> {
    const counts = await this.counts()
    return {
      health: healthOf(
        worstLevel([levelOf('job_queue_waiting', counts.waiting), levelOf('job_queue_failed', counts.recentFailed)])
      ),
      ...counts
    }
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    jobs: JobCounts
  }
}

/** The job queue's part of the monitoring: its counts, the measures they give, its metrics. */
function jobsPart (jobs: ProvisioningJobQueue): MonitoringSource<JobCounts> {
  const window = 'within QUEUE_HEALTH_WINDOW_MS, which its health is judged on'
  return {
    description: 'the provisioning job queue',
    read: () => jobs.counts(),
    measures: {
      job_queue_waiting: (counts) => ({ value: counts.waiting }),
      job_queue_failed: (counts) => ({ value: counts.recentFailed })
    },
    metrics: [
      {
        name: 'portal_bff_job_queue_jobs',
        help: 'Jobs of the provisioning job queue by state; absent while the queue does not answer',
        type: 'gauge',
        samples: (counts) =>
          JOB_STATES.map((state) => ({ labels: { queue: PROVISIONING_QUEUE, state }, value: counts[state] }))
      },
      {
        name: 'portal_bff_job_queue_recent_failed_jobs',
        help: `Jobs of the provisioning job queue that failed after their last attempt ${window}`,
        type: 'gauge',
        samples: (counts) => [{ labels: { queue: PROVISIONING_QUEUE }, value: counts.recentFailed }]
      }
    ]
  }
}

/**
 * Opens the provisioning worker and the queue it takes its jobs from, part of the orders plugin
 * (index.ts): the worker closes when the instance does.
 */
export async function openJobQueue (
  fastify: FastifyInstance,
  orders: { store: OrderStore, statusChanges: OrderStatusChanges }
): Promise<ProvisioningJobQueue> {
  const { config } = fastify
  const worker = await ProvisioningWorker.open({
    config,
    deps: {
      orders: orders.store,
      statusChanges: orders.statusChanges,
      billing: fastify.upstreams.billing.client,
      crm: fastify.upstreams.crm.client,
      telecom: fastify.upstreams.telecom.client,
      billingQueue: fastify.upstreams.billing.queue,
      crmQueue: fastify.upstreams.crm.queue,
      log: fastify.log
    },
    observeLag: (seconds) => fastify.metrics.observeProvisioningLag(seconds),
    log: fastify.log,
    logFor: fastify.logFor
  })
  const jobs = new ProvisioningJobQueue(worker.queue, {
    enqueueTimeoutMs: config.REDIS_COMMAND_TIMEOUT_MS * 5,
    countsTimeoutMs: config.REDIS_COMMAND_TIMEOUT_MS,
    failureWindowMs: config.QUEUE_HEALTH_WINDOW_MS
  })
  fastify.monitoring.register('jobs', jobsPart(jobs))
  fastify.addHook('onClose', () => worker.close())
  return jobs
}

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { Queue, Worker, type Job } from 'bullmq'
import { Redis } from 'ioredis'
import { abortable } from '../../../lib/abortable.js'
import { runInContext } from '../../../lib/log-context.js'
import { classifyFailure } from '../../../lib/errors.js'
import { SpanKind, currentTraceparent, inSpan, linkTo } from '../../../lib/tracing.js'
import { JOB_STATES, failOrder, provisionOrder, type JobCounts, type ProvisioningDependencies } from './provisioning.js'
import { healthOf, levelOf, worstLevel, type QueueHealth } from '../monitoring/levels.js'
import { closeRedis, redisConnectionOptions } from '../../external/redis.js'
import { OutageLog } from '../../../lib/outage-log.js'
import { jobQueuePrefix } from '../redis-keys.js'

export const PROVISIONING_QUEUE = 'provisioning'

interface ProvisioningJob {
  crmOrderId: string
  /** The W3C traceparent of the work that queued the job (the platform event's hand-off), while tracing. */
  traceparent?: string
}

/** The correlation id of an order's work (its hand-off and provisioning): reserved, no client may send it. */
export function orderWorkId (crmOrderId: string): string {
  return `order:${crmOrderId}`
}

/** The job id derives from the CRM order id, so a replayed or duplicated event never makes a second job. */
export function jobIdOf (crmOrderId: string): string {
  return `order-${crmOrderId}`
}

/**
 * The worker's lock and stalled-job check for a PROVISIONING_LOCK_MS. BullMQ renews the locks of
 * the jobs it runs on a timer, at most half a lock apart, whatever a job is doing: a step may outlast
 * the lock (a CRM call takes up to CRM_QUEUE_TIMEOUT_MS, its wait included), and what the lock bounds
 * is how late a renewal may be, half of it (an event loop blocked, Redis not answering). Were one
 * later, another instance would run the job again, which repeats no step's effect (telecom
 * idempotency key, AcceptOrder reconciled, the CRM PATCH sets the same status). A dead instance's job
 * is free once its lock expires, and taken at the next stalled check. Checks are one script for every
 * instance together, spaced by a key that lives one interval (so checking often is cheap), and one
 * that comes as that key expires waits another interval: the job runs again within a lock and a half.
 */
export function lockOptions (lockMs: number): { lockDuration: number, stalledInterval: number } {
  return { lockDuration: lockMs, stalledInterval: Math.floor(lockMs / 4) }
}

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
    const traceparent = currentTraceparent()
    const data: ProvisioningJob = traceparent === undefined ? { crmOrderId } : { crmOrderId, traceparent }
    await abortable(this.queue.add('provision', data, { jobId: jobIdOf(crmOrderId) }), AbortSignal.timeout(this.bounds.enqueueTimeoutMs))
  }

  async counts (): Promise<JobCounts> {
    const [counts, recentFailed] = await abortable(Promise.all([
      this.queue.getJobCounts(...JOB_STATES),
      this.#recentlyFailed()
    ]), AbortSignal.timeout(this.bounds.countsTimeoutMs))
    return { waiting: counts.waiting ?? 0, active: counts.active ?? 0, delayed: counts.delayed ?? 0, failed: counts.failed ?? 0, completed: counts.completed ?? 0, recentFailed }
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
    return { health: healthOf(worstLevel([levelOf('job_queue_waiting', counts.waiting), levelOf('job_queue_failed', counts.recentFailed)])), ...counts }
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    jobQueue: ProvisioningJobQueue
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    jobs: JobCounts
  }
}

async function jobQueue (fastify: FastifyInstance) {
  const { config } = fastify
  const prefix = jobQueuePrefix(config.REDIS_KEY_PREFIX)
  // BullMQ wants its own connections: a worker's blocking commands must never time out. The producer
  // has neither ioredis's command timeout nor a disabled offline queue: BullMQ's client proxy leaves
  // the rejections those produce unhandled, which would end the process. Enqueueing is bounded here.
  // BullMQ duplicates the consumer for its blocking commands; the duplicates inherit this strategy,
  // which stops reconnecting once the service is closing.
  let closing = false
  const retryStrategy = (attempt: number) => closing ? null : Math.min(attempt * 100, 2000)
  const producer = new Redis({ ...redisConnectionOptions(config), maxRetriesPerRequest: 1, retryStrategy, disableClientInfo: true })
  const consumer = new Redis({ ...redisConnectionOptions(config), maxRetriesPerRequest: null, retryStrategy, disableClientInfo: true })
  for (const connection of [producer, consumer]) connection.on('error', () => {})

  const queue = new Queue<ProvisioningJob>(PROVISIONING_QUEUE, {
    connection: producer,
    prefix,
    defaultJobOptions: {
      attempts: config.PROVISIONING_ATTEMPTS,
      backoff: { type: 'exponential', delay: config.PROVISIONING_BACKOFF_MS },
      removeOnComplete: { age: 7 * 86_400 },
      removeOnFail: { age: 30 * 86_400 }
    }
  })
  const deps: ProvisioningDependencies = {
    orders: fastify.orders,
    orderEvents: fastify.orderEvents,
    billing: fastify.billing,
    crm: fastify.crm,
    telecom: fastify.telecom,
    billingQueue: fastify.billingQueue,
    crmQueue: fastify.crmQueue,
    log: fastify.log
  }
  const worker = new Worker<ProvisioningJob>(PROVISIONING_QUEUE, async (job: Job<ProvisioningJob>) => {
    const { crmOrderId } = job.data
    // Every line of the job, its upstream calls' included, carries the order's id: grep it from event to Active.
    const correlationId = orderWorkId(crmOrderId)
    // A trace of its own (an attempt may run long after its event), linked to the hand-off that queued it.
    const link = linkTo(job.data.traceparent)
    await inSpan('provisioning job', {
      kind: SpanKind.CONSUMER,
      root: true,
      links: link === undefined ? [] : [link],
      attributes: { 'crm.order_id': crmOrderId, 'job.id': job.id ?? '', 'job.attempt': job.attemptsMade + 1 }
    }, () => runInContext({ correlationId, log: fastify.logFor(correlationId) }, () => provision(job)))
  }, { connection: consumer, prefix, concurrency: config.PROVISIONING_CONCURRENCY, ...lockOptions(config.PROVISIONING_LOCK_MS) })

  async function provision (job: Job<ProvisioningJob>): Promise<void> {
    const { crmOrderId } = job.data
    try {
      await provisionOrder(deps, crmOrderId)
      // The job is queued by the event's hand-off, and one job runs per CRM order (its id is the job's).
      fastify.metrics.observeProvisioningLag((Date.now() - job.timestamp) / 1000)
    } catch (error) {
      const reason = `${classifyFailure(error)}: ${error instanceof Error ? error.message : String(error)}`
      const last = job.attemptsMade + 1 >= (job.opts.attempts ?? 1)
      fastify.log[last ? 'error' : 'warn']({ crmOrderId, attempt: job.attemptsMade + 1, reason }, last ? 'provisioning failed for good' : 'provisioning attempt failed; it will be retried')
      if (last) await failOrder(deps, crmOrderId, reason)
      throw error
    }
  }
  // A job whose worker ended with it more often than BullMQ allows (a process killed each time it
  // provisions this order) is failed by BullMQ without being run: the order must say so, as after a
  // last failed attempt, or it would stay Provisioning.
  worker.on('failed', (job, error) => {
    if (job === undefined || job.deferredFailure === undefined) return
    const { crmOrderId } = job.data
    const reason = `stalled: ${error.message}`
    fastify.logFor(orderWorkId(crmOrderId)).error({ crmOrderId, reason }, 'provisioning failed for good')
    failOrder(deps, crmOrderId, reason).catch((failure: unknown) => fastify.log.error({ err: failure, crmOrderId }, 'a stalled order could not be marked failed'))
  })
  // BullMQ re-emits connection errors on the queue and the worker (unheard, an 'error' event throws),
  // one per reconnection attempt: an outage is one line, and its end another.
  const outage = new OutageLog(fastify.log, 'provisioning job queue: Redis')
  worker.on('error', (error) => outage.error(error))
  queue.on('error', (error) => outage.error(error))
  for (const connection of [producer, consumer]) connection.on('ready', () => outage.recovered())

  // Started here, BullMQ's own setup commands are done before anything could close its connections.
  await Promise.all([queue.waitUntilReady(), worker.waitUntilReady()])
  const jobs = new ProvisioningJobQueue(queue, {
    enqueueTimeoutMs: config.REDIS_COMMAND_TIMEOUT_MS * 5,
    countsTimeoutMs: config.REDIS_COMMAND_TIMEOUT_MS,
    failureWindowMs: config.QUEUE_HEALTH_WINDOW_MS
  })
  fastify.decorate('jobQueue', jobs)
  const window = 'within QUEUE_HEALTH_WINDOW_MS, which its health is judged on'
  fastify.monitoring.register('jobs', {
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
        samples: (counts) => JOB_STATES.map((state) => ({ labels: { queue: PROVISIONING_QUEUE, state }, value: counts[state] }))
      },
      {
        name: 'portal_bff_job_queue_recent_failed_jobs',
        help: `Jobs of the provisioning job queue that failed after their last attempt ${window}`,
        type: 'gauge',
        samples: (counts) => [{ labels: { queue: PROVISIONING_QUEUE }, value: counts.recentFailed }]
      }
    ]
  })
  fastify.addHook('onClose', async () => {
    closing = true
    // With Redis answering, the worker finishes the jobs it holds (within a queue deadline). With
    // Redis away or hung, BullMQ's close would wait for it, so nothing is waited on: the closes are
    // forced and the connections dropped; the jobs it held are taken over by another instance once
    // their lock expires.
    const redisUp = await abortable(consumer.ping(), AbortSignal.timeout(config.REDIS_COMMAND_TIMEOUT_MS)).then(() => true, () => false)
    if (redisUp) {
      const deadline = AbortSignal.timeout(config.CRM_QUEUE_TIMEOUT_MS)
      await abortable(worker.close(), deadline).catch(() => fastify.log.warn('provisioning worker did not close in time; its connections are dropped'))
      await abortable(queue.close(), deadline).catch(() => {})
      await Promise.all([closeRedis(producer), closeRedis(consumer)])
      return
    }
    worker.close(true).catch(() => {})
    queue.close().catch(() => {})
    producer.disconnect()
    consumer.disconnect()
  })
}

export default fp(jobQueue, { name: 'job-queue', fastify: '5.x', dependencies: ['orders', 'upstreams', 'request-queues', 'monitoring'], decorators: { fastify: ['config'] } })

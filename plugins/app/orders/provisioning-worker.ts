import type { FastifyBaseLogger } from 'fastify'
import { Queue, Worker, type Job } from 'bullmq'
import { Redis } from 'ioredis'
import { abortable } from '../../../lib/abortable.js'
import { runInContext } from '../../../lib/request-context.js'
import { orderWorkId } from '../../../lib/request-log.js'
import { classifyFailure } from '../../../lib/errors.js'
import { SpanKind, inSpan, linkTo } from '../../../lib/tracing.js'
import { OutageLog } from '../../../lib/outage-log.js'
import type { Config } from '../../../schemas/config.js'
import { closeRedis, redisConnectionOptions } from '../../external/redis-connection.js'
import { jobQueuePrefix } from '../redis-keys.js'
import { failOrder, provisionOrder, type ProvisioningDependencies } from './provisioning.js'
import { JOB_MESSAGING, PROVISIONING_QUEUE, lockOptions, type ProvisioningJob } from './provisioning-job.js'

export interface ProvisioningWorkerOptions {
  config: Pick<Config, 'REDIS_URL' | 'REDIS_COMMAND_TIMEOUT_MS' | 'redisSentinel' | 'REDIS_KEY_PREFIX' |
    'PROVISIONING_ATTEMPTS' | 'PROVISIONING_BACKOFF_MS' | 'PROVISIONING_CONCURRENCY' | 'PROVISIONING_LOCK_MS' |
    'CRM_QUEUE_TIMEOUT_MS'>
  deps: ProvisioningDependencies
  /** Told how long each provisioned order waited since its job was queued (seconds). */
  observeLag: (seconds: number) => void
  log: FastifyBaseLogger
  /** The logger of an order's work, its lines carrying the order's id. */
  logFor: (correlationId: string) => FastifyBaseLogger
}

/** The BullMQ queue `provisioning` and its worker, on Redis connections of their own. */
export class ProvisioningWorker {
  #closing = false
  /** The jobs this instance is running: what a close waits for. */
  readonly #running = new Set<Promise<void>>()
  readonly queue: Queue<ProvisioningJob>
  readonly #worker: Worker<ProvisioningJob>
  readonly #producer: Redis
  readonly #consumer: Redis

  private constructor (private readonly options: ProvisioningWorkerOptions) {
    const { config, log } = options
    const prefix = jobQueuePrefix(config.REDIS_KEY_PREFIX)
    // BullMQ wants its own connections: a worker's blocking commands must never time out. The producer
    // has neither ioredis's command timeout nor a disabled offline queue: BullMQ's client proxy leaves
    // the rejections those produce unhandled, which would end the process. Enqueueing is bounded by
    // the caller. BullMQ duplicates the consumer for its blocking commands; the duplicates inherit this
    // strategy, which stops reconnecting once the service is closing.
    const retryStrategy = (attempt: number) => this.#closing ? null : Math.min(attempt * 100, 2000)
    this.#producer = new Redis({
      ...redisConnectionOptions(config),
      maxRetriesPerRequest: 1,
      retryStrategy,
      disableClientInfo: true
    })
    this.#consumer = new Redis({
      ...redisConnectionOptions(config),
      maxRetriesPerRequest: null,
      retryStrategy,
      disableClientInfo: true
    })
    for (const connection of [this.#producer, this.#consumer]) connection.on('error', () => {})

    this.queue = new Queue<ProvisioningJob>(PROVISIONING_QUEUE, {
      connection: this.#producer,
      prefix,
      defaultJobOptions: {
        attempts: config.PROVISIONING_ATTEMPTS,
        backoff: { type: 'exponential', delay: config.PROVISIONING_BACKOFF_MS },
        removeOnComplete: { age: 7 * 86_400 },
        removeOnFail: { age: 30 * 86_400 }
      }
    })
    this.#worker = new Worker<ProvisioningJob>(PROVISIONING_QUEUE, (job) => this.#track(this.#run(job)), {
      connection: this.#consumer,
      prefix,
      concurrency: config.PROVISIONING_CONCURRENCY,
      ...lockOptions(config.PROVISIONING_LOCK_MS)
    })
    // A job whose worker ended with it more often than BullMQ allows (a process killed each time it
    // provisions this order) is failed by BullMQ without being run: the order must say so, as after a
    // last failed attempt, or it would stay Provisioning.
    this.#worker.on('failed', (job, error) => {
      if (job === undefined || job.deferredFailure === undefined) return
      const { crmOrderId } = job.data
      const reason = `stalled: ${error.message}`
      options.logFor(orderWorkId(crmOrderId)).error({ crmOrderId, reason }, 'provisioning failed for good')
      failOrder(options.deps, crmOrderId, reason).catch((failure: unknown) =>
        log.error({ err: failure, crmOrderId }, 'a stalled order could not be marked failed')
      )
    })
    // BullMQ re-emits connection errors on the queue and the worker (unheard, an 'error' event throws),
    // one per reconnection attempt: an outage is one line, and its end another.
    const outage = new OutageLog(log, 'provisioning job queue: Redis')
    this.#worker.on('error', (error) => outage.error(error))
    this.queue.on('error', (error) => outage.error(error))
    for (const connection of [this.#producer, this.#consumer]) connection.on('ready', () => outage.recovered())
  }

  /** Started here, BullMQ's own setup commands are done before anything could close its connections. */
  static async open (options: ProvisioningWorkerOptions): Promise<ProvisioningWorker> {
    const opened = new ProvisioningWorker(options)
    await Promise.all([opened.queue.waitUntilReady(), opened.#worker.waitUntilReady()])
    return opened
  }

  /**
   * With Redis answering, the worker takes no new job and finishes those it holds, within a queue
   * deadline; then its close is forced. (A graceful close past the deadline would go on renewing
   * the locks of a job that never ends, a timer that keeps the process alive.) With Redis away or
   * hung, BullMQ's close would wait for it, so nothing is waited on: the closes are forced and the
   * connections dropped. A job given up is taken over by another instance once its lock expires.
   */
  async close (): Promise<void> {
    const { config, log } = this.options
    this.#closing = true
    const redisUp = await abortable(this.#consumer.ping(), AbortSignal.timeout(config.REDIS_COMMAND_TIMEOUT_MS))
      .then(() => true, () => false)
    if (redisUp) {
      const deadline = AbortSignal.timeout(config.CRM_QUEUE_TIMEOUT_MS)
      // Not BullMQ's pause(), which waits for the jobs too but then connects its blocking client
      // again: a job finishing past the deadline would open a connection that nothing closes.
      await this.#worker.pause(true)
      const finished = await abortable(Promise.allSettled([...this.#running]), deadline).then(() => true, () => false)
      if (!finished) {
        log.warn('provisioning jobs did not finish in time; left to another instance once their lock expires')
      }
      // Forced either way: a graceful close can wait on BullMQ's blocking client past any bound,
      // leaving it open. The finished jobs' results are already sent on the shared connection,
      // which closes after (QUIT waits for them). Each close has its own bound: the jobs' deadline
      // may be spent.
      await abortable(this.#worker.close(true), AbortSignal.timeout(config.REDIS_COMMAND_TIMEOUT_MS)).catch(() => {})
      await abortable(this.queue.close(), AbortSignal.timeout(config.REDIS_COMMAND_TIMEOUT_MS)).catch(() => {})
      await Promise.all([closeRedis(this.#producer), closeRedis(this.#consumer)])
      return
    }
    this.#worker.close(true).catch(() => {})
    this.queue.close().catch(() => {})
    this.#producer.disconnect()
    this.#consumer.disconnect()
  }

  #track (run: Promise<void>): Promise<void> {
    this.#running.add(run)
    const settled = () => { this.#running.delete(run) }
    run.then(settled, settled)
    return run
  }

  async #run (job: Job<ProvisioningJob>): Promise<void> {
    const { crmOrderId } = job.data
    // Every line of the job, its upstream calls' included, carries the order's id: grep it from event to Active.
    const correlationId = orderWorkId(crmOrderId)
    // A trace of its own (an attempt may run long after its event), linked to the hand-off that queued it.
    const link = linkTo(job.data.traceparent)
    await inSpan('provisioning job', {
      kind: SpanKind.CONSUMER,
      root: true,
      links: link === undefined ? [] : [link],
      attributes: {
        ...JOB_MESSAGING,
        'messaging.operation.type': 'process',
        'messaging.message.id': job.id ?? '',
        'crm.order_id': crmOrderId,
        'job.id': job.id ?? '',
        'job.attempt': job.attemptsMade + 1
      }
    }, () => runInContext({ correlationId, log: this.options.logFor(correlationId) }, () => this.#provision(job)))
  }

  async #provision (job: Job<ProvisioningJob>): Promise<void> {
    const { deps, observeLag, log } = this.options
    const { crmOrderId } = job.data
    try {
      await provisionOrder(deps, crmOrderId)
      // The job is queued by the event's hand-off, and one job runs per CRM order (its id is the job's).
      observeLag((Date.now() - job.timestamp) / 1000)
    } catch (error) {
      const reason = `${classifyFailure(error)}: ${error instanceof Error ? error.message : String(error)}`
      const last = job.attemptsMade + 1 >= (job.opts.attempts ?? 1)
      log[last ? 'error' : 'warn'](
        { crmOrderId, attempt: job.attemptsMade + 1, reason },
        last ? 'provisioning failed for good' : 'provisioning attempt failed; it will be retried'
      )
      if (last) await failOrder(deps, crmOrderId, reason)
      throw error
    }
  }
}

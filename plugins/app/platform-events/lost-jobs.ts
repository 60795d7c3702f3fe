import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import type { OrderStore } from '../orders/store.js'
import type { ProvisioningJobQueue } from '../orders/job-queue.js'

// How often each instance looks for the job queue's epoch key, and how long one instance's claim to
// queue the lost jobs again holds before another may try.
const JOBS_EPOCH_CHECK_MS = 5000
const JOBS_EPOCH_CLAIM_MS = 60_000
const REQUEUE_CHUNK = 50

const RELEASE_CLAIM = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

export interface LostJobsOptions {
  redis: Redis
  /** The job queue's epoch key (redis-keys.ts). */
  epochKey: string
  orders: Pick<OrderStore, 'awaitingProvisioning'>
  jobQueue: Pick<ProvisioningJobQueue, 'enqueue'>
  log: FastifyBaseLogger
}

/**
 * Queued jobs live in Redis alone. An epoch key beside them, written once their orders' jobs are
 * queued: missing, Redis is new or lost its data (restarted empty, failed over, emptied), and the
 * first instance to notice queues again the jobs of every order still waiting for its own. The
 * job id is the CRM order id: a job Redis still holds is not made twice.
 */
export class LostJobs {
  #requeueing: Promise<void> | undefined
  #watching: NodeJS.Timeout | undefined

  constructor (private readonly options: LostJobsOptions) {}

  /** Queues the lost jobs again at once when Redis holds no epoch, then looks every few seconds. */
  async start (): Promise<void> {
    await this.#requeue(true)
    this.#watching = setInterval(() => { this.#requeue() }, JOBS_EPOCH_CHECK_MS).unref()
  }

  async stop (): Promise<void> {
    clearInterval(this.#watching)
    await this.#requeueing
  }

  #requeue (atStart = false): Promise<void> {
    this.#requeueing ??= this.#requeueLostJobs(atStart).finally(() => { this.#requeueing = undefined })
    return this.#requeueing
  }

  async #requeueLostJobs (atStart: boolean): Promise<void> {
    const { redis, epochKey, orders, jobQueue, log } = this.options
    const claim = randomUUID()
    // Redis away: nothing to claim, and its absence is reported elsewhere.
    const claimed = await redis.set(epochKey, claim, 'PX', JOBS_EPOCH_CLAIM_MS, 'NX').catch(() => null)
    if (claimed !== 'OK') return
    try {
      const crmOrderIds = await orders.awaitingProvisioning()
      log[atStart && crmOrderIds.length === 0 ? 'info' : 'warn']({ orders: crmOrderIds.length },
        `Redis holds no job queue epoch (new, restarted empty or emptied): queueing again the jobs of ${crmOrderIds.length} orders awaiting provisioning`)
      for (let start = 0; start < crmOrderIds.length; start += REQUEUE_CHUNK) {
        await Promise.all(
          crmOrderIds.slice(start, start + REQUEUE_CHUNK).map((crmOrderId) => jobQueue.enqueue(crmOrderId))
        )
      }
      await redis.set(epochKey, new Date().toISOString())
    } catch (error) {
      log.warn({ err: error }, 'jobs lost with Redis\'s data not all queued again: retried shortly')
      await redis.eval(RELEASE_CLAIM, 1, epochKey, claim).catch(() => {})
    }
  }
}

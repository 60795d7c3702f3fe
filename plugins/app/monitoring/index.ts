import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import {
  ChangeLog, judge, readingsOf,
  type Absence, type CoreHealth, type JobCounts, type Judgement, type MonitoringSnapshot, type QueueSnapshot, type SubscriberStats
} from './alerts.js'
import { poolUsage } from '../../../lib/pg-pool.js'
import type { Sample } from './metrics.js'
import { JOB_STATES } from '../orders/provisioning.js'
import type { UpstreamQueue } from '../request-queues.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The live measures of seed §8, their judgement, and the scrape-time metrics. */
    monitoring: Monitoring
  }
}

/** What the monitoring needs of the provisioning job queue and the platform-event subscriber. */
interface JobQueueSource { counts (): Promise<JobCounts> }
interface SubscriberSource { stats (): Record<string, unknown> }

/** The platform-event subscriber goes by either name. */
const SUBSCRIBER_DECORATORS = ['eventSubscriber', 'eventSubscription']

/** The seed's polling interval: changes are noticed (and logged) this soon even when nobody looks. */
export const EVALUATION_INTERVAL_MS = 30_000

/** The work's result, or undefined when it fails or takes longer than `ms`. */
async function bounded<T> (work: () => Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), ms) })
  try {
    return await Promise.race([work().catch(() => undefined), timeout])
  } finally {
    clearTimeout(timer)
  }
}

function queueSnapshot (queue: UpstreamQueue): QueueSnapshot {
  return { health: queue.health(), metrics: queue.metrics(), recentFailedRequests: queue.recentFailures() }
}

function isoTime (value: unknown): string | null {
  if (value === null || value === undefined) return null
  const date = value instanceof Date ? value : new Date(value as string | number)
  return Number.isNaN(date.getTime()) ? null : date.toISOString()
}

const count = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) ? value : 0)

/** The subscriber's own stats, in the shape the page and /metrics show, whatever their types. */
function subscriberStats (stats: Record<string, unknown>): SubscriberStats {
  const { state, lastEventAt, replayId, received, reconnects, lastError } = stats
  return {
    state: String(state ?? 'unknown'),
    lastEventAt: isoTime(lastEventAt),
    replayId: typeof replayId === 'number' || typeof replayId === 'string' ? replayId : null,
    received: count(received),
    reconnects: count(reconnects),
    lastError: lastError === null || lastError === undefined ? null : String(lastError)
  }
}

export class Monitoring {
  readonly #fastify: FastifyInstance
  readonly #changes: ChangeLog
  #inFlight: Promise<MonitoringSnapshot> | undefined

  constructor (fastify: FastifyInstance) {
    this.#fastify = fastify
    this.#changes = new ChangeLog(fastify.log)
  }

  /** Every source read once; concurrent callers (a scrape's collectors, say) share one reading. */
  snapshot (): Promise<MonitoringSnapshot> {
    this.#inFlight ??= this.#read().finally(() => { this.#inFlight = undefined })
    return this.#inFlight
  }

  /** The snapshot judged against the thresholds; a change of level is logged once. */
  async evaluate (): Promise<{ snapshot: MonitoringSnapshot, judgement: Judgement }> {
    const snapshot = await this.snapshot()
    const judgement = judge(readingsOf(snapshot))
    this.#changes.observe(snapshot.core, judgement)
    return { snapshot, judgement }
  }

  async coreHealth (): Promise<CoreHealth> {
    const results = await this.#fastify.coreHealth.run()
    const checks = { database: results.database?.status ?? 'fail', cache: results.cache?.status ?? 'fail' }
    return { status: checks.database === 'ok' && checks.cache === 'ok' ? 'ok' : 'degraded', checks }
  }

  async #read (): Promise<MonitoringSnapshot> {
    const fastify = this.#fastify
    const timeoutMs = fastify.config.HEALTH_CHECK_TIMEOUT_MS
    const [core, usage, memory, jobs] = await Promise.all([
      this.coreHealth(),
      bounded(() => fastify.crmUsage.read(), timeoutMs),
      bounded(() => fastify.servicesCache.memory(), timeoutMs),
      this.#jobCounts(timeoutMs)
    ])
    const used = usage?.used ?? 0
    const limit = usage?.limit ?? null
    const cache = fastify.servicesCache.stats()
    return {
      timestamp: new Date().toISOString(),
      core,
      billing: queueSnapshot(fastify.billingQueue),
      crm: {
        ...queueSnapshot(fastify.crmQueue),
        dailyUsage: { used, limit, percent: limit === null || limit === 0 ? null : Number(((100 * used) / limit).toFixed(2)), limitSource: usage?.limitSource ?? 'unknown' }
      },
      jobs,
      subscriber: this.#subscriber(),
      http: fastify.metrics.httpRequests.summary(),
      upstreams: { billing: fastify.upstreamCalls.billing.summary(), crm: fastify.upstreamCalls.crm.summary(), telecom: fastify.upstreamCalls.telecom.summary() },
      cache: { hitRate: fastify.servicesCache.recentHitRate(), latencyP95Ms: cache.latency.p95Ms, memory: memory ?? null },
      database: { ...poolUsage(fastify.pg.pool), queries: fastify.metrics.queries.summary() }
    }
  }

  // The job queue and the subscriber come from another part of the service, which may be absent.
  async #jobCounts (timeoutMs: number): Promise<JobCounts | Absence> {
    if (!this.#fastify.hasDecorator('jobQueue')) return 'absent'
    const source = (this.#fastify as unknown as { jobQueue: JobQueueSource }).jobQueue
    return await bounded(() => source.counts(), timeoutMs) ?? 'unavailable'
  }

  #subscriber (): SubscriberStats | Absence {
    const name = SUBSCRIBER_DECORATORS.find((candidate) => this.#fastify.hasDecorator(candidate))
    if (name === undefined) return 'absent'
    try {
      return subscriberStats((this.#fastify as unknown as Record<string, SubscriberSource>)[name]!.stats())
    } catch {
      return 'unavailable'
    }
  }
}

/** The scrape-time metrics: every source of the measures, under its conventional name. */
function registerLiveMetrics (fastify: FastifyInstance, monitoring: Monitoring): void {
  const { metrics } = fastify
  const live = (name: string, help: string, type: 'gauge' | 'counter', read: (snapshot: MonitoringSnapshot) => Sample[]) =>
    metrics.live(name, help, type, async () => read(await monitoring.snapshot()))
  const queues = (snapshot: MonitoringSnapshot) => [['billing', snapshot.billing], ['crm', snapshot.crm]] as const
  const perQueue = (value: (queue: QueueSnapshot) => number) => (snapshot: MonitoringSnapshot) =>
    queues(snapshot).map(([queue, report]) => ({ labels: { queue }, value: value(report) }))

  live('portal_bff_health_check_up', 'Core health checks of GET /health: 1 ok, 0 fail', 'gauge', ({ core }) =>
    Object.entries(core.checks).map(([check, status]) => ({ labels: { check }, value: status === 'ok' ? 1 : 0 })))

  live('portal_bff_queue_size', 'Requests waiting in the upstream request queue', 'gauge', perQueue((queue) => queue.metrics.queueSize))
  live('portal_bff_queue_pending_requests', 'Requests of the upstream request queue in flight', 'gauge', perQueue((queue) => queue.metrics.pendingRequests))
  live('portal_bff_queue_recent_failed_requests', 'Failed requests of the upstream request queue within QUEUE_HEALTH_WINDOW_MS, which its health is judged on', 'gauge', perQueue((queue) => queue.recentFailedRequests))
  live('portal_bff_queue_requests_total', 'Requests seen by the upstream request queue', 'counter', perQueue((queue) => queue.metrics.totalRequests))
  live('portal_bff_queue_requests_completed_total', 'Requests completed by the upstream request queue', 'counter', perQueue((queue) => queue.metrics.completedRequests))
  live('portal_bff_queue_requests_failed_total', 'Requests failed in the upstream request queue', 'counter', perQueue((queue) => queue.metrics.failedRequests))
  live('portal_bff_queue_average_wait_seconds', 'Average wait in the upstream request queue within QUEUE_HEALTH_WINDOW_MS', 'gauge', perQueue((queue) => queue.metrics.averageWaitTime / 1000))
  live('portal_bff_queue_average_execution_seconds', 'Average execution time of upstream requests within QUEUE_HEALTH_WINDOW_MS', 'gauge', perQueue((queue) => queue.metrics.averageExecutionTime / 1000))

  live('portal_bff_crm_daily_api_requests', 'CRM API requests of the last 24 hours, as the CRM reports them', 'gauge', ({ crm }) => [{ value: crm.dailyUsage.used }])
  live('portal_bff_crm_daily_api_limit', 'The CRM daily API quota; absent while unknown', 'gauge', ({ crm }) =>
    crm.dailyUsage.limit === null ? [] : [{ value: crm.dailyUsage.limit }])

  live('portal_bff_job_queue_jobs', 'Jobs of the provisioning job queue by state; absent while the queue is not running or does not answer', 'gauge', ({ jobs }) =>
    typeof jobs === 'string' ? [] : JOB_STATES.map((state) => ({ labels: { queue: 'provisioning', state }, value: jobs[state] })))
  live('portal_bff_job_queue_recent_failed_jobs', 'Jobs of the provisioning job queue that failed after their last attempt within QUEUE_HEALTH_WINDOW_MS, which its health is judged on', 'gauge', ({ jobs }) =>
    typeof jobs === 'string' ? [] : [{ labels: { queue: 'provisioning' }, value: jobs.recentFailed }])

  live('portal_bff_event_subscriber_state', 'The platform-event subscription\'s state (1 for the current one)', 'gauge', ({ subscriber }) =>
    typeof subscriber === 'string' ? [] : [{ labels: { state: subscriber.state }, value: 1 }])
  live('portal_bff_event_subscriber_events_received_total', 'Platform events received', 'counter', ({ subscriber }) =>
    typeof subscriber === 'string' ? [] : [{ value: subscriber.received }])
  live('portal_bff_event_subscriber_reconnects_total', 'Reconnections of the platform-event subscription', 'counter', ({ subscriber }) =>
    typeof subscriber === 'string' ? [] : [{ value: subscriber.reconnects }])
  live('portal_bff_event_subscriber_last_event_timestamp_seconds', 'When the last platform event was received (Unix time)', 'gauge', ({ subscriber }) =>
    typeof subscriber === 'string' || subscriber.lastEventAt === null ? [] : [{ value: Date.parse(subscriber.lastEventAt) / 1000 }])

  live('portal_bff_cache_reads_total', 'Services cache reads by result (a Redis failure is a miss)', 'counter', () => {
    const { hits, misses } = fastify.servicesCache.stats()
    return [{ labels: { result: 'hit' }, value: hits }, { labels: { result: 'miss' }, value: misses }]
  })
  live('portal_bff_cache_errors_total', 'Services cache commands Redis did not answer', 'counter', () => [{ value: fastify.servicesCache.stats().errors }])
  live('portal_bff_cache_memory_used_bytes', 'Redis used_memory; absent while Redis does not answer', 'gauge', ({ cache }) =>
    cache.memory === null ? [] : [{ value: cache.memory.usedBytes }])
  live('portal_bff_cache_memory_max_bytes', 'Redis maxmemory; absent when Redis has no limit', 'gauge', ({ cache }) =>
    cache.memory?.maxBytes == null ? [] : [{ value: cache.memory.maxBytes }])
  live('portal_bff_cache_keys', 'Keys in the Redis database', 'gauge', ({ cache }) => cache.memory === null ? [] : [{ value: cache.memory.keys }])

  live('portal_bff_rate_limit_bypassed_total', 'Requests let through unlimited because the rate limiter could not reach Redis', 'counter', () =>
    [{ value: fastify.rateLimitBypassed() }])

  live('portal_bff_db_pool_connections_in_use', 'Connections of the business pool lent out', 'gauge', ({ database }) => [{ value: database.inUse }])
  live('portal_bff_db_pool_connections_idle', 'Idle connections of the business pool', 'gauge', ({ database }) => [{ value: database.idle }])
  live('portal_bff_db_pool_connections_max', 'Size of the business pool (DATABASE_POOL_MAX)', 'gauge', ({ database }) => [{ value: database.max }])
  live('portal_bff_db_pool_waiting_requests', 'Callers waiting for a connection of the business pool', 'gauge', ({ database }) => [{ value: database.waiting }])
}

async function monitoring (fastify: FastifyInstance) {
  const instance = new Monitoring(fastify)
  fastify.decorate('monitoring', instance)
  registerLiveMetrics(fastify, instance)

  const timer = setInterval(() => {
    instance.evaluate().catch((error: unknown) => fastify.log.warn({ err: error }, 'alert evaluation failed'))
  }, EVALUATION_INTERVAL_MS)
  timer.unref()
  fastify.addHook('onClose', async () => clearInterval(timer))
}

export default fp(monitoring, {
  name: 'monitoring',
  fastify: '5.x',
  dependencies: ['metrics', 'postgres', 'rate-limit', 'health', 'request-queues', 'services-cache', 'upstreams'],
  decorators: { fastify: ['config'] }
})

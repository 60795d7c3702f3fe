import type { QueueMetrics } from '../../../lib/request-queue.js'
import type { WindowSummary } from '../../../lib/sliding-window.js'
import type { RedisMemory } from '../services-cache.js'
import type { PoolUsage } from '../../../lib/pg-pool.js'
import type { CheckStatus } from '../../../lib/health-checks.js'
import type { JobCounts } from '../orders/provisioning.js'
import {
  INCIDENT_PRIORITIES, POST_INCIDENT_REVIEW_BUSINESS_DAYS, THRESHOLDS, levelOf, priorityOf, worstLevel,
  type Comparison, type Level, type MeasureName, type QueueHealth, type Unit
} from './thresholds.js'

export type { CheckStatus, JobCounts }

export interface CoreHealth {
  status: 'ok' | 'degraded'
  checks: { database: CheckStatus, cache: CheckStatus }
}

export interface SubscriberStats {
  state: string
  lastEventAt: string | null
  replayId: number | string | null
  received: number
  reconnects: number
  lastError: string | null
}

export interface QueueSnapshot {
  health: QueueHealth
  metrics: QueueMetrics
  recentFailedRequests: number
}

/** Why a source gave no figure: it is not part of this service yet, or it did not answer. */
export type Absence = 'absent' | 'unavailable'

/** Everything the measures are read from, taken at one moment. */
export interface MonitoringSnapshot {
  timestamp: string
  core: CoreHealth
  billing: QueueSnapshot
  crm: QueueSnapshot & { dailyUsage: { used: number, limit: number | null, percent: number | null, limitSource: string } }
  jobs: JobCounts | Absence
  subscriber: SubscriberStats | Absence
  http: WindowSummary
  upstreams: Record<'billing' | 'crm' | 'telecom', WindowSummary>
  cache: { hitRate: number | null, latencyP95Ms: number | null, memory: RedisMemory | null }
  database: PoolUsage & { queries: WindowSummary }
}

export interface Reading {
  value: number | null
  /** Why there is no value, when there is none. */
  note?: string
}

export type Readings = Record<MeasureName, Reading>

const NO_JOB_QUEUE: Record<Absence, string> = {
  absent: 'no data: the provisioning job queue is not part of this service',
  unavailable: 'no data: the job queue did not answer'
}

function jobReading (jobs: JobCounts | Absence, count: 'waiting' | 'recentFailed'): Reading {
  return typeof jobs === 'string' ? { value: null, note: NO_JOB_QUEUE[jobs] } : { value: jobs[count] }
}

function windowed (value: number | null, what: string): Reading {
  return value === null ? { value: null, note: `no data: no ${what} in the last 5 minutes` } : { value }
}

function combined (windows: WindowSummary[]): number | null {
  const count = windows.reduce((sum, window) => sum + window.count, 0)
  const failures = windows.reduce((sum, window) => sum + window.failures, 0)
  return count === 0 ? null : (100 * failures) / count
}

function slowest (values: Array<number | null>): number | null {
  const known = values.filter((value): value is number => value !== null)
  return known.length === 0 ? null : Math.max(...known)
}

function memoryReading (memory: RedisMemory | null): Reading {
  if (memory === null) return { value: null, note: 'no data: Redis did not answer' }
  if (memory.maxBytes === null) return { value: null, note: 'Redis has no maxmemory limit: there is no limit to judge memory against' }
  return { value: (100 * memory.usedBytes) / memory.maxBytes }
}

/** Each row's value, in the row's unit, from a snapshot. */
export function readingsOf (snapshot: MonitoringSnapshot): Readings {
  const { core, billing, crm, jobs, http, upstreams, cache, database } = snapshot
  const failingChecks = Object.values(core.checks).filter((status) => status === 'fail').length
  return {
    core_status: { value: failingChecks },
    billing_queue_size: { value: billing.metrics.queueSize },
    billing_failed_requests: { value: billing.recentFailedRequests },
    crm_daily_usage: crm.dailyUsage.limit === null || crm.dailyUsage.limit === 0
      ? { value: null, note: 'no data: neither the CRM nor CRM_DAILY_API_LIMIT has given a limit' }
      : { value: (100 * crm.dailyUsage.used) / crm.dailyUsage.limit },
    job_queue_waiting: jobReading(jobs, 'waiting'),
    job_queue_failed: jobReading(jobs, 'recentFailed'),
    api_response_time_p95: windowed(http.p95, 'requests'),
    http_5xx_rate: windowed(http.failureRate, 'requests'),
    crm_billing_response_time: windowed(slowest([upstreams.crm.p95, upstreams.billing.p95]), 'CRM or billing calls'),
    telecom_response_time: windowed(upstreams.telecom.p95, 'telecom calls'),
    external_error_rate: windowed(combined(Object.values(upstreams)), 'upstream calls'),
    cache_hit_rate: windowed(cache.hitRate, 'cache reads'),
    cache_latency: cache.latencyP95Ms === null ? { value: null, note: 'no data: no cache commands yet' } : { value: cache.latencyP95Ms },
    cache_memory: memoryReading(cache.memory),
    database_pool_usage: { value: (100 * database.inUse) / database.max },
    query_duration: windowed(database.queries.p95, 'queries')
  }
}

export interface Alert {
  measure: MeasureName
  description: string
  value: number | null
  unit: Unit
  level: Level
  threshold: { comparison: Comparison, warning: number, critical: number }
  crossed: 'warning' | 'critical' | null
  priority: 'P1' | 'P2' | null
  note?: string
}

export interface Judgement {
  level: Level
  alerts: Alert[]
}

const round = (value: number) => Number(value.toFixed(2))

/** Every row judged against its thresholds, and the overall level: the worst of them. */
export function judge (readings: Readings): Judgement {
  const alerts = THRESHOLDS.map((row): Alert => {
    const { value, note } = readings[row.measure]
    const level = levelOf(row.measure, value)
    const rowNote = 'note' in row ? row.note : undefined
    return {
      measure: row.measure,
      description: row.description,
      value: value === null ? null : round(value),
      unit: row.unit,
      level,
      threshold: { comparison: row.comparison, warning: row.warning, critical: row.critical },
      crossed: level === 'ok' ? null : level,
      priority: priorityOf(row.measure, level),
      ...((note ?? rowNote) !== undefined && { note: note ?? rowNote })
    }
  })
  return { level: worstLevel(alerts.map((alert) => alert.level)), alerts }
}

/** The priorities of seed §8, as /health/alerts reports them. */
export const PRIORITIES = {
  ...Object.fromEntries(Object.entries(INCIDENT_PRIORITIES).map(([priority, { respondWithinMinutes, postIncidentReview }]) => [
    priority,
    { respondWithinMinutes, postIncidentReviewWithinBusinessDays: postIncidentReview ? POST_INCIDENT_REVIEW_BUSINESS_DAYS : null }
  ]))
} as Record<keyof typeof INCIDENT_PRIORITIES, { respondWithinMinutes: number, postIncidentReviewWithinBusinessDays: number | null }>

interface Log {
  info (object: object, message: string): void
  warn (object: object, message: string): void
  error (object: object, message: string): void
}

/**
 * Logs a change of core health or of the overall alert level once, when it is seen, whoever looked
 * (a probe, the page or the periodic evaluation): warn for degraded or warning, error for critical,
 * info on the way back to ok.
 */
export class ChangeLog {
  #core: CoreHealth['status'] = 'ok'
  #level: Level = 'ok'

  constructor (private readonly log: Log) {}

  observe (core: CoreHealth, { level, alerts }: Judgement): void {
    if (core.status !== this.#core) {
      this.#core = core.status
      if (core.status === 'degraded') this.log.warn({ checks: core.checks }, 'core health degraded')
      else this.log.info({ checks: core.checks }, 'core health ok again')
    }
    if (level !== this.#level) {
      const previous = this.#level
      this.#level = level
      const alerting = alerts.filter((alert) => alert.level !== 'ok').map(({ measure, value, unit, level }) => ({ measure, value, unit, level }))
      const details = { alertLevel: level, previousAlertLevel: previous, alerts: alerting }
      if (level === 'critical') this.log.error(details, 'alert level critical')
      else if (level === 'warning') this.log.warn(details, 'alert level warning')
      else this.log.info(details, 'alert level ok again')
    }
  }
}

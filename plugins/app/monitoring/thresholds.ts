/**
 * The monitoring thresholds of the specification (specification §8), as data. Everything that judges a
 * value (queue health, /health/alerts, /metrics, the Prometheus rules and the Grafana dashboard)
 * reads this table, so they cannot drift apart.
 */
import { UPSTREAMS, type ProductUpstream, type QueuedUpstream } from '../../../integrations/registry.js'
import type { Threshold } from './threshold-row.js'
import { queueRows, responseTimeRows, type RowSource } from './upstream-rows.js'

const HTTP_LABELS = ['method', 'route', 'status_class'] as const

/** The rows of the service itself, in the table's order; the registry's rows go between them. */
const SERVICE_ROWS = [
  {
    measure: 'core_status',
    description: 'core health: failing checks of GET /health',
    unit: 'failing checks',
    comparison: 'above',
    // The specification's warning (`degraded`) and critical (any check `fail`) are the same condition:
    // `degraded` means a check fails. So one failing check is critical (and past warning too).
    warning: 0,
    critical: 0,
    priority: { warning: 'P3', critical: 'P1' },
    note: 'a degraded core (database or cache failing) is critical: the specification\'s warning and critical are the same condition',
    prometheus: { kind: 'failing', metric: 'portal_bff_health_check_up', without: ['check'] }
  },
  {
    measure: 'crm_daily_usage',
    description: 'CRM daily API usage against its limit',
    unit: 'percent',
    comparison: 'above',
    warning: 80,
    critical: 95,
    // Past the quota every CRM call fails, which the error and provisioning rows page on; nearing it is a ticket.
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'crm',
    shared: true,
    prometheus: {
      kind: 'quotient',
      numerator: 'portal_bff_crm_daily_api_requests',
      denominator: 'portal_bff_crm_daily_api_limit'
    }
  },
  {
    measure: 'job_queue_waiting',
    description: 'provisioning job queue: waiting jobs',
    unit: 'jobs',
    comparison: 'above',
    warning: 10,
    critical: 50,
    priority: { warning: 'P4', critical: 'P2' },
    shared: true,
    prometheus: {
      kind: 'gauge',
      metric: 'portal_bff_job_queue_jobs',
      match: { queue: 'provisioning', state: 'waiting' },
      without: ['queue', 'state']
    }
  },
  {
    measure: 'job_queue_failed',
    description: 'provisioning job queue: jobs failed in the recent window',
    unit: 'jobs',
    comparison: 'above',
    warning: 5,
    critical: 20,
    priority: { warning: 'P4', critical: 'P2' },
    shared: true,
    prometheus: {
      kind: 'gauge',
      metric: 'portal_bff_job_queue_recent_failed_jobs',
      match: { queue: 'provisioning' },
      without: ['queue']
    }
  },
  {
    measure: 'orders_pending_age',
    description: 'orders the CRM approved, still in Pending Review: age of the oldest',
    unit: 'seconds',
    comparison: 'above',
    // The defaults of ORDERS_PENDING_WARNING_S and ORDERS_PENDING_CRITICAL_S.
    warning: 900,
    critical: 3600,
    // The specification's incident: the CRM approved orders, and they are never provisioned.
    priority: { warning: 'P4', critical: 'P2' },
    note: 'judged on the orders the CRM approved (as the reconciliation last read its Status), from when it found them approved; orders awaiting approval are counted apart, never judged',
    shared: true,
    configurable: {
      warning: { setting: 'ORDERS_PENDING_WARNING_S', metric: 'portal_bff_orders_pending_age_warning_seconds' },
      critical: { setting: 'ORDERS_PENDING_CRITICAL_S', metric: 'portal_bff_orders_pending_age_critical_seconds' }
    },
    prometheus: { kind: 'gauge', metric: 'portal_bff_orders_pending_oldest_age_seconds' }
  },
  {
    measure: 'reconciliation_crm_failed_rounds',
    description: 'order reconciliation: rounds in a row that could not ask the CRM where the orders in Pending Review stand',
    unit: 'rounds',
    comparison: 'above',
    // Three failed rounds in a row (contract §10a): the service is blind to the orders the CRM
    // approved and whose event did not come. Twelve: an hour at the default interval.
    warning: 2,
    critical: 11,
    // Blind, an approved order waits unseen: a page at once, as a stuck order's would be.
    priority: { warning: 'P2', critical: 'P2' },
    dependency: 'crm',
    note: 'a round that cannot ask the CRM (an error, a timeout, a refused query) leaves every order in Pending Review unjudged; a round with nothing to ask, or one the CRM answers, ends the run',
    shared: true,
    prometheus: { kind: 'gauge', metric: 'portal_bff_reconciliation_crm_failed_rounds_in_row' }
  },
  {
    measure: 'api_response_time_p95',
    description: 'API response time, 95th percentile over 5 minutes',
    unit: 'ms',
    comparison: 'above',
    warning: 2000,
    critical: 5000,
    priority: { warning: 'P4', critical: 'P2' },
    note: 'every request but the probes (health, metrics, status page)',
    minSamples: 20,
    prometheus: { kind: 'quantile', histogram: 'portal_bff_http_request_duration_seconds', without: HTTP_LABELS }
  },
  {
    measure: 'http_5xx_rate',
    description: 'share of responses with HTTP 5xx over 5 minutes',
    unit: 'percent',
    comparison: 'above',
    warning: 1,
    critical: 5,
    priority: { warning: 'P3', critical: 'P1' },
    note: 'every request but the probes (health, metrics, status page)',
    minSamples: 20,
    prometheus: {
      kind: 'ratio',
      metric: 'portal_bff_http_request_duration_seconds_count',
      label: 'status_class',
      part: { is: '5xx' },
      example: { part: '5xx', rest: '2xx' },
      without: HTTP_LABELS
    }
  },
  {
    measure: 'crm_billing_response_time',
    description: 'CRM or billing response time, 95th percentile over 5 minutes (the slower of the two)',
    unit: 'ms',
    comparison: 'above',
    warning: 2000,
    critical: 5000,
    priority: { warning: 'P4', critical: 'P3' },
    minSamples: 10,
    prometheus: {
      kind: 'quantile',
      histogram: 'portal_bff_upstream_request_duration_seconds',
      match: { upstream: ['billing', 'crm'] },
      without: ['outcome'],
      maxOver: 'upstream'
    }
  },
  {
    measure: 'external_error_rate',
    description: 'share of failed upstream calls (billing, CRM, telecom) over 5 minutes',
    unit: 'percent',
    comparison: 'above',
    warning: 1,
    critical: 5,
    priority: { warning: 'P4', critical: 'P3' },
    minSamples: 20,
    prometheus: {
      kind: 'ratio',
      metric: 'portal_bff_upstream_request_duration_seconds_count',
      label: 'outcome',
      part: { not: 'ok' },
      example: { part: 'http_5xx', rest: 'ok' },
      without: ['upstream', 'outcome']
    }
  },
  {
    measure: 'cache_hit_rate',
    description: 'services cache hit rate over 5 minutes',
    unit: 'percent',
    comparison: 'below',
    warning: 80,
    critical: 60,
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'redis',
    minSamples: 20,
    // A read a second: at a few reads a minute, portal users seldom read one page twice within its TTL.
    costVolume: 300,
    prometheus: {
      kind: 'ratio',
      metric: 'portal_bff_cache_reads_total',
      label: 'result',
      part: { is: 'hit' },
      example: { part: 'hit', rest: 'miss' },
      without: ['result']
    }
  },
  {
    measure: 'cache_latency',
    description: 'services cache command latency, 95th percentile',
    unit: 'ms',
    comparison: 'above',
    warning: 10,
    critical: 50,
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'redis',
    minSamples: 20,
    costVolume: 300,
    prometheus: { kind: 'quantile', histogram: 'portal_bff_cache_command_duration_seconds' }
  },
  {
    measure: 'cache_memory',
    description: 'Redis memory used against maxmemory',
    unit: 'percent',
    comparison: 'above',
    warning: 80,
    critical: 95,
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'redis',
    shared: true,
    prometheus: {
      kind: 'quotient',
      numerator: 'portal_bff_cache_memory_used_bytes',
      denominator: 'portal_bff_cache_memory_max_bytes'
    }
  },
  {
    measure: 'database_pool_usage',
    description: 'database connection pool in use',
    unit: 'percent',
    comparison: 'above',
    warning: 80,
    critical: 95,
    // A full pool makes API requests wait, then fail with HTTP 500: the latency and 5xx rows page on that.
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'database',
    prometheus: {
      kind: 'quotient',
      numerator: 'portal_bff_db_pool_connections_in_use',
      denominator: 'portal_bff_db_pool_connections_max'
    }
  },
  {
    measure: 'query_duration',
    description: 'database query duration, 95th percentile over 5 minutes',
    unit: 'ms',
    comparison: 'above',
    warning: 500,
    critical: 2000,
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'database',
    minSamples: 20,
    prometheus: { kind: 'quantile', histogram: 'portal_bff_db_query_duration_seconds', without: ['outcome'] }
  }
] as const satisfies readonly Threshold[]

type ServiceMeasure = typeof SERVICE_ROWS[number]['measure']

/**
 * The thresholds table of a service with these upstreams: the service's rows, each request
 * queue's after the core's, and each upstream's response time after the CRM's and billing's.
 */
export function thresholdsOf (upstreams: readonly RowSource[]): readonly Threshold[] {
  const [core, ...rest] = SERVICE_ROWS
  const afterResponseTimes = rest.findIndex((row) => row.measure === 'crm_billing_response_time') + 1
  return [
    core,
    ...queueRows(upstreams),
    ...rest.slice(0, afterResponseTimes),
    ...responseTimeRows(upstreams),
    ...rest.slice(afterResponseTimes)
  ]
}

type QueuedName = QueuedUpstream['name']
type TimedName = Extract<ProductUpstream, { responseTime: object }>['name']

/** The name of a row of the product's table. */
export type MeasureName = ServiceMeasure | `${QueuedName}_queue_size` | `${QueuedName}_failed_requests` | `${TimedName}_response_time`

/** The product's table: its rows and the upstream registry's. */
export const THRESHOLDS: readonly Threshold[] = thresholdsOf(UPSTREAMS)

/** The same, by another name kept for the code that reads every field of any row. */
export const ROWS: readonly Threshold[] = THRESHOLDS

export const MEASURES = THRESHOLDS.map((row) => row.measure) as readonly MeasureName[]

const byMeasure = new Map<string, Threshold>(THRESHOLDS.map((threshold) => [threshold.measure, threshold]))

export function threshold (measure: MeasureName): Threshold {
  return byMeasure.get(measure) as Threshold
}

/**
 * The monitoring thresholds of the specification (specification §8), as data. Everything that judges a
 * value (queue health, /health/alerts, /metrics, the Prometheus rules and the Grafana dashboard)
 * reads this table, so they cannot drift apart.
 */
export type Level = 'ok' | 'warning' | 'critical'

export type Comparison = 'above' | 'below'

export type Unit = 'failing checks' | 'requests' | 'jobs' | 'percent' | 'ms' | 'seconds'

/** Specification §8: incident response times by priority. P1 and P2 page on-call; P3 and P4 open tickets. */
export type Priority = 'P1' | 'P2' | 'P3' | 'P4'

/** The priorities that page a person (decision 0058): the rest open tickets. */
export const PAGING_PRIORITIES: readonly Priority[] = ['P1', 'P2']

export function pages (priority: Priority): boolean {
  return PAGING_PRIORITIES.includes(priority)
}

/** A dependency a row's alerts name, so that a page says what failed (an alert label). */
export type Dependency = 'billing' | 'crm' | 'telecom' | 'database' | 'redis'

export const INCIDENT_PRIORITIES = {
  P1: { respondWithinMinutes: 15, postIncidentReview: true },
  P2: { respondWithinMinutes: 60, postIncidentReview: true },
  P3: { respondWithinMinutes: 240, postIncidentReview: false },
  P4: { respondWithinMinutes: 1440, postIncidentReview: false }
} as const satisfies Record<Priority, { respondWithinMinutes: number, postIncidentReview: boolean }>

/** Specification §8: a post-incident review is held within 3 business days after a P1 or P2. */
export const POST_INCIDENT_REVIEW_BUSINESS_DAYS = 3

/** Label matchers: a string is `=`, a list is `=~` of the alternatives. */
export type Matchers = Readonly<Record<string, string | readonly string[]>>

/**
 * How Prometheus computes a row's value, in the row's unit, from the service's `/metrics`.
 * Every expression keeps only the target's labels (job, instance and the like), so each alert is
 * one per instance.
 */
export type PrometheusSource =
  /**
   * A gauge as it is: `sum without (labels) (metric{match})`. `recent`: the counter of what the gauge
   * counts over a window of its own, whose increase says the condition still holds now.
   */
  | { kind: 'gauge', metric: string, match?: Matchers, without?: readonly string[], recent?: { counter: string, match?: Matchers, without?: readonly string[] } }
  /** Checks that are down, from a 1/0 gauge: `sum without (labels) (1 - metric)`. */
  | { kind: 'failing', metric: string, without: readonly string[] }
  /** A share of a limit, in percent: `100 * numerator / denominator`. */
  | { kind: 'quotient', numerator: string, denominator: string }
  /**
   * The share of a counter's increase over 5 minutes whose `label` matches `part`, in percent.
   * `part.not` counts every value but that one; `example` is a value on the other side, for tests.
   */
  | { kind: 'ratio', metric: string, label: string, part: { is: string } | { not: string }, example: { part: string, rest: string }, without: readonly string[] }
  /**
   * The 95th percentile of a histogram over 5 minutes, in ms; with `maxOver`, the highest of the
   * percentiles of each value of that label. Thresholds must be bucket boundaries.
   */
  | { kind: 'quantile', histogram: string, match?: Matchers, without?: readonly string[], maxOver?: string }

export interface Threshold {
  /** Stable name, used as the alert and metric label. */
  measure: string
  description: string
  unit: Unit
  comparison: Comparison
  warning: number
  critical: number
  /**
   * What each level routes to (decision 0058): P1 and P2 page, only for what means portal users are
   * failing now (availability, errors, latency, provisioning stopped); P3 and P4 open tickets.
   */
  priority: { warning: Priority, critical: Priority }
  /** The dependency the row measures, named on its alerts. */
  dependency?: Dependency
  /**
   * A cost or efficiency row opens a ticket only on at least this many samples in 5 minutes (the
   * rules only): below it, what the row costs is too little to act on. /health/alerts still judges
   * it on `minSamples`.
   */
  costVolume?: number
  /** Shown with the value: what the row counts, or why it is judged as it is. */
  note?: string
  /**
   * A share or percentile of the recent window is judged only on at least this many samples (the
   * service and the rules alike): 1 failure of 1 request, or 1 miss of 5 reads, means nothing yet.
   */
  minSamples?: number
  /**
   * The value is of state every instance shares (PostgreSQL, the Redis job queue and quota): each
   * reports the same, so the rules judge the highest of them once, with no `instance` label, and an
   * instance that dies takes no alert with it.
   */
  shared?: true
  /**
   * Settings move the row's limits from the table's defaults (which are theirs): the service exports
   * the limits it judges with as gauges, and the rules compare with those, so that they follow the
   * deployment's settings with no hand edit.
   */
  configurable?: Readonly<Record<'warning' | 'critical', { setting: string, metric: string }>>
  prometheus: PrometheusSource
}

const HTTP_LABELS = ['method', 'route', 'status_class'] as const

export const THRESHOLDS = [
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
    measure: 'billing_queue_size',
    description: 'billing request queue: requests waiting',
    unit: 'requests',
    comparison: 'above',
    warning: 10,
    critical: 50,
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'billing',
    prometheus: { kind: 'gauge', metric: 'portal_bff_queue_size', match: { queue: 'billing' }, without: ['queue'] }
  },
  {
    measure: 'billing_failed_requests',
    description: 'billing request queue: failed requests in the recent window',
    unit: 'requests',
    comparison: 'above',
    warning: 5,
    critical: 20,
    priority: { warning: 'P4', critical: 'P2' },
    dependency: 'billing',
    prometheus: {
      kind: 'gauge',
      metric: 'portal_bff_queue_recent_failed_requests',
      match: { queue: 'billing' },
      without: ['queue'],
      recent: { counter: 'portal_bff_queue_requests_failed_total', match: { queue: 'billing' }, without: ['queue'] }
    }
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
    prometheus: { kind: 'quotient', numerator: 'portal_bff_crm_daily_api_requests', denominator: 'portal_bff_crm_daily_api_limit' }
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
    prometheus: { kind: 'gauge', metric: 'portal_bff_job_queue_jobs', match: { queue: 'provisioning', state: 'waiting' }, without: ['queue', 'state'] }
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
    prometheus: { kind: 'gauge', metric: 'portal_bff_job_queue_recent_failed_jobs', match: { queue: 'provisioning' }, without: ['queue'] }
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
    prometheus: { kind: 'ratio', metric: 'portal_bff_http_request_duration_seconds_count', label: 'status_class', part: { is: '5xx' }, example: { part: '5xx', rest: '2xx' }, without: HTTP_LABELS }
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
    prometheus: { kind: 'quantile', histogram: 'portal_bff_upstream_request_duration_seconds', match: { upstream: ['billing', 'crm'] }, without: ['outcome'], maxOver: 'upstream' }
  },
  {
    measure: 'telecom_response_time',
    description: 'telecom provider response time, 95th percentile over 5 minutes',
    unit: 'ms',
    comparison: 'above',
    warning: 3000,
    critical: 10_000,
    priority: { warning: 'P4', critical: 'P3' },
    dependency: 'telecom',
    minSamples: 10,
    prometheus: { kind: 'quantile', histogram: 'portal_bff_upstream_request_duration_seconds', match: { upstream: 'telecom' }, without: ['outcome', 'upstream'] }
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
    prometheus: { kind: 'ratio', metric: 'portal_bff_upstream_request_duration_seconds_count', label: 'outcome', part: { not: 'ok' }, example: { part: 'http_5xx', rest: 'ok' }, without: ['upstream', 'outcome'] }
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
    prometheus: { kind: 'ratio', metric: 'portal_bff_cache_reads_total', label: 'result', part: { is: 'hit' }, example: { part: 'hit', rest: 'miss' }, without: ['result'] }
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
    prometheus: { kind: 'quotient', numerator: 'portal_bff_cache_memory_used_bytes', denominator: 'portal_bff_cache_memory_max_bytes' }
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
    prometheus: { kind: 'quotient', numerator: 'portal_bff_db_pool_connections_in_use', denominator: 'portal_bff_db_pool_connections_max' }
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

export type MeasureName = typeof THRESHOLDS[number]['measure']

/** The table's rows as the general row type, for code that reads every field of any row. */
export const ROWS: readonly Threshold[] = THRESHOLDS

export const MEASURES: readonly MeasureName[] = THRESHOLDS.map((row) => row.measure)

const byMeasure = new Map<string, Threshold>(THRESHOLDS.map((threshold) => [threshold.measure, threshold]))

export function threshold (measure: MeasureName): Threshold {
  return byMeasure.get(measure) as Threshold
}

/** A row's limits where the deployment's settings move them from the table's defaults. */
export type Limits = Partial<Record<MeasureName, { warning: number, critical: number }>>

/** Whether a value is past a limit in the row's direction (strictly: a value at the limit is not). */
export function crosses (comparison: Comparison, value: number, limit: number): boolean {
  return comparison === 'above' ? value > limit : value < limit
}

/** The level of a value against a row of the table (or the limits given for it); `ok` when there is no value to judge. */
export function levelOf (measure: MeasureName, value: number | null, limits: Limits = {}): Level {
  if (value === null) return 'ok'
  const { comparison } = threshold(measure)
  const { warning, critical } = limits[measure] ?? threshold(measure)
  if (crosses(comparison, value, critical)) return 'critical'
  if (crosses(comparison, value, warning)) return 'warning'
  return 'ok'
}

/** The priority a row's level routes to (P1 and P2 page, P3 and P4 open a ticket); none when ok. */
export function priorityOf (measure: MeasureName, level: Level): Priority | null {
  return level === 'ok' ? null : threshold(measure).priority[level]
}

const SEVERITY: Record<Level, number> = { ok: 0, warning: 1, critical: 2 }

export function severityOf (level: Level): number {
  return SEVERITY[level]
}

/** A queue's `health` (specification 2.2: `healthy` is a working queue's) at a level. */
export type QueueHealth = 'healthy' | 'degraded' | 'unhealthy'
const HEALTH_OF_LEVEL: Record<Level, QueueHealth> = { ok: 'healthy', warning: 'degraded', critical: 'unhealthy' }

export function healthOf (level: Level): QueueHealth {
  return HEALTH_OF_LEVEL[level]
}

export function worstLevel (levels: Iterable<Level>): Level {
  let worst: Level = 'ok'
  for (const level of levels) if (SEVERITY[level] > SEVERITY[worst]) worst = level
  return worst
}

/**
 * The monitoring thresholds of the specification (seed §8), as data. Everything that judges a
 * value (queue health, /health/alerts, /metrics, the Prometheus rules) reads this table.
 */
export type Level = 'ok' | 'warning' | 'critical'

export type Comparison = 'above' | 'below'

export interface Threshold {
  /** Stable name, used as the alert and metric label. */
  measure: string
  description: string
  unit: 'failing checks' | 'requests' | 'jobs' | 'percent' | 'ms'
  comparison: Comparison
  warning: number
  critical: number
}

export const THRESHOLDS = [
  // The seed's warning (`degraded`) and critical (any check `fail`) are the same condition.
  { measure: 'core_status', description: 'core health: failing checks of GET /health', unit: 'failing checks', comparison: 'above', warning: 0, critical: 0 },
  { measure: 'billing_queue_size', description: 'billing request queue: requests waiting', unit: 'requests', comparison: 'above', warning: 10, critical: 50 },
  { measure: 'billing_failed_requests', description: 'billing request queue: failed requests in the recent window', unit: 'requests', comparison: 'above', warning: 5, critical: 20 },
  { measure: 'crm_daily_usage', description: 'CRM daily API usage against its limit', unit: 'percent', comparison: 'above', warning: 80, critical: 95 },
  { measure: 'job_queue_waiting', description: 'provisioning job queue: waiting jobs', unit: 'jobs', comparison: 'above', warning: 10, critical: 50 },
  { measure: 'job_queue_failed', description: 'provisioning job queue: failed jobs', unit: 'jobs', comparison: 'above', warning: 5, critical: 20 },
  { measure: 'api_response_time_p95', description: 'API response time, 95th percentile over 5 minutes', unit: 'ms', comparison: 'above', warning: 2000, critical: 5000 },
  { measure: 'http_5xx_rate', description: 'share of responses with HTTP 5xx over 5 minutes', unit: 'percent', comparison: 'above', warning: 1, critical: 5 },
  { measure: 'crm_billing_response_time', description: 'CRM or billing response time, 95th percentile over 5 minutes (the slower of the two)', unit: 'ms', comparison: 'above', warning: 2000, critical: 5000 },
  { measure: 'telecom_response_time', description: 'telecom provider response time, 95th percentile over 5 minutes', unit: 'ms', comparison: 'above', warning: 3000, critical: 10_000 },
  { measure: 'external_error_rate', description: 'share of failed upstream calls over 5 minutes', unit: 'percent', comparison: 'above', warning: 1, critical: 5 },
  { measure: 'cache_hit_rate', description: 'services cache hit rate', unit: 'percent', comparison: 'below', warning: 80, critical: 60 },
  { measure: 'cache_latency', description: 'services cache command latency, 95th percentile', unit: 'ms', comparison: 'above', warning: 10, critical: 50 },
  { measure: 'cache_memory', description: 'Redis memory used against maxmemory', unit: 'percent', comparison: 'above', warning: 80, critical: 95 },
  { measure: 'database_pool_usage', description: 'database connection pool in use', unit: 'percent', comparison: 'above', warning: 80, critical: 95 },
  { measure: 'query_duration', description: 'database query duration, 95th percentile over 5 minutes', unit: 'ms', comparison: 'above', warning: 500, critical: 2000 }
] as const satisfies readonly Threshold[]

export type MeasureName = typeof THRESHOLDS[number]['measure']

const byMeasure = new Map<string, Threshold>(THRESHOLDS.map((threshold) => [threshold.measure, threshold]))

export function threshold (measure: MeasureName): Threshold {
  return byMeasure.get(measure) as Threshold
}

function crosses (comparison: Comparison, value: number, limit: number): boolean {
  return comparison === 'above' ? value > limit : value < limit
}

/** The level of a value against a row of the table; `ok` when there is no value to judge. */
export function levelOf (measure: MeasureName, value: number | null): Level {
  if (value === null) return 'ok'
  const { comparison, warning, critical } = threshold(measure)
  if (crosses(comparison, value, critical)) return 'critical'
  if (crosses(comparison, value, warning)) return 'warning'
  return 'ok'
}

const SEVERITY: Record<Level, number> = { ok: 0, warning: 1, critical: 2 }

export function worstLevel (levels: Iterable<Level>): Level {
  let worst: Level = 'ok'
  for (const level of levels) if (SEVERITY[level] > SEVERITY[worst]) worst = level
  return worst
}

/**
 * What a row of the thresholds table says (its unit, direction, limits, the priorities its levels
 * route to, how Prometheus computes its value), and the incident priorities of the specification.
 */
export type Comparison = 'above' | 'below'

export type Unit = 'failing checks' | 'requests' | 'jobs' | 'percent' | 'ms' | 'seconds' | 'rounds'

/** Specification §8: incident response times by priority. P1 and P2 page on-call; P3 and P4 open tickets. */
export type Priority = 'P1' | 'P2' | 'P3' | 'P4'

/** The priorities that page a person (decision 0058): the rest open tickets. */
export const PAGING_PRIORITIES: readonly Priority[] = ['P1', 'P2']

export function pages (priority: Priority): boolean {
  return PAGING_PRIORITIES.includes(priority)
}

/**
 * A dependency a row's alerts name, so that a page says what failed (an alert label): `database`,
 * `redis`, or an upstream of the registry by its name (the rows made from the registry carry it).
 */
export type Dependency = 'database' | 'redis' | (string & {})

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
  | {
    kind: 'gauge',
    metric: string,
    match?: Matchers,
    without?: readonly string[],
    recent?: { counter: string, match?: Matchers, without?: readonly string[] }
  }
  /** Checks that are down, from a 1/0 gauge: `sum without (labels) (1 - metric)`. */
  | { kind: 'failing', metric: string, without: readonly string[] }
  /** A share of a limit, in percent: `100 * numerator / denominator`. */
  | { kind: 'quotient', numerator: string, denominator: string }
  /**
   * The share of a counter's increase over 5 minutes whose `label` matches `part`, in percent.
   * `part.not` counts every value but that one; `example` is a value on the other side, for tests.
   */
  | {
    kind: 'ratio',
    metric: string,
    label: string,
    part: { is: string } | { not: string },
    example: { part: string, rest: string },
    without: readonly string[]
  }
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

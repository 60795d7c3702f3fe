import type { FastifyBaseLogger } from 'fastify'
import { round } from '../../../lib/numbers.js'
import type { WindowSummary } from '../../../lib/sliding-window.js'
import { THRESHOLDS, type MeasureName } from './thresholds.js'
import { levelAgainst, priorityOf, worstLevel, type Level, type Limits } from './levels.js'
import {
  INCIDENT_PRIORITIES, POST_INCIDENT_REVIEW_BUSINESS_DAYS, type Comparison, type Priority, type Threshold, type Unit
} from './threshold-row.js'

/** A measure's value in its row's unit, or why there is none. */
export interface Reading {
  value: number | null
  /** For a share or percentile of the recent window: how many samples it is of. */
  samples?: number
  note?: string
}

export type Readings = Record<MeasureName, Reading>

/** A value of the recent window, of `samples` samples, or why there is none. */
export function windowed (value: number | null, samples: number, what: string): Reading {
  return value === null || samples === 0 ? { value: null, samples, note: `no data: no ${what} in the last 5 minutes` } : { value, samples }
}

/** The share of failed samples of several windows together, in percent; null when they are empty. */
export function combinedFailureRate (windows: WindowSummary[]): number | null {
  const count = windows.reduce((sum, window) => sum + window.count, 0)
  const failures = windows.reduce((sum, window) => sum + window.failures, 0)
  return count === 0 ? null : (100 * failures) / count
}

/** The highest of the known values; null when none is known. */
export function highest (values: Array<number | null>): number | null {
  const known = values.filter((value): value is number => value !== null)
  return known.length === 0 ? null : Math.max(...known)
}

export interface Alert {
  measure: MeasureName
  description: string
  value: number | null
  unit: Unit
  level: Level
  threshold: { comparison: Comparison, warning: number, critical: number }
  crossed: 'warning' | 'critical' | null
  priority: Priority | null
  note?: string
}

export interface Judgement {
  level: Level
  alerts: Alert[]
}

/** A reading of fewer samples than its row needs has no value yet, and says why. */
function withEnoughSamples ({ minSamples }: Threshold, reading: Reading): Reading {
  if (
    minSamples === undefined ||
    reading.value === null ||
    reading.samples === undefined ||
    reading.samples >= minSamples
  ) {
    return reading
  }
  return { value: null, samples: reading.samples, note: `too few samples to judge: ${reading.samples} of the ${minSamples} needed in the last 5 minutes` }
}

/**
 * Every row of the table (the product's, or that of the service's registry) judged against its
 * thresholds (or the limits the settings give it), and the overall level: the worst of them.
 */
export function judge (readings: Readings, limits: Limits = {}, rows: readonly Threshold[] = THRESHOLDS): Judgement {
  const alerts = rows.map((row): Alert => {
    const measure = row.measure as MeasureName
    const { value, note } = withEnoughSamples(
      row,
      readings[measure] ?? { value: null, note: 'no data: not measured by this service' }
    )
    const moved = limits[measure]
    const level = levelAgainst(row, value, moved)
    const { warning, critical } = moved ?? row
    return {
      measure,
      description: row.description,
      value: value === null ? null : round(value),
      unit: row.unit,
      level,
      threshold: { comparison: row.comparison, warning, critical },
      crossed: level === 'ok' ? null : level,
      priority: priorityOf(row, level),
      ...((note ?? row.note) !== undefined && { note: note ?? row.note })
    }
  })
  return { level: worstLevel(alerts.map((alert) => alert.level)), alerts }
}

/** The incident priorities of the specification, as /health/alerts reports them. */
export const PRIORITIES = Object.fromEntries(
  Object.entries(INCIDENT_PRIORITIES).map(([priority, { respondWithinMinutes, postIncidentReview }]) => [
    priority,
    {
      respondWithinMinutes,
      postIncidentReviewWithinBusinessDays: postIncidentReview ? POST_INCIDENT_REVIEW_BUSINESS_DAYS : null
    }
  ])) as Record<
    keyof typeof INCIDENT_PRIORITIES,
    { respondWithinMinutes: number, postIncidentReviewWithinBusinessDays: number | null }
  >

/** The core health a change of which is logged. */
export interface CoreStatus {
  status: 'ok' | 'degraded'
  checks: Record<string, string>
}

/**
 * Logs a change of core health or of the overall alert level once, when it is seen, whoever looked
 * (a probe, the page or the periodic evaluation): warn for degraded or warning, error for critical,
 * info on the way back to ok.
 */
export class ChangeLog {
  #core: CoreStatus['status'] = 'ok'
  #level: Level = 'ok'

  constructor (private readonly log: Pick<FastifyBaseLogger, 'info' | 'warn' | 'error'>) {}

  observe (core: CoreStatus | undefined, { level, alerts }: Judgement): void {
    if (core !== undefined && core.status !== this.#core) {
      this.#core = core.status
      if (core.status === 'degraded') this.log.warn({ checks: core.checks }, 'core health degraded')
      else this.log.info({ checks: core.checks }, 'core health ok again')
    }
    if (level !== this.#level) {
      const previous = this.#level
      this.#level = level
      const alerting = alerts
        .filter((alert) => alert.level !== 'ok')
        .map(({ measure, value, unit, level }) => ({ measure, value, unit, level }))
      const details = { alertLevel: level, previousAlertLevel: previous, alerts: alerting }
      if (level === 'critical') this.log.error(details, 'alert level critical')
      else if (level === 'warning') this.log.warn(details, 'alert level warning')
      else this.log.info(details, 'alert level ok again')
    }
  }
}

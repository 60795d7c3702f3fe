/** The judgement of a value against its row of the thresholds table: its level, priority and a queue's health. */
import { threshold, type MeasureName } from './thresholds.js'
import type { Comparison, Priority, Threshold } from './threshold-row.js'

export type Level = 'ok' | 'warning' | 'critical'

/** A row's limits where the deployment's settings move them from the table's defaults. */
export type Limits = Partial<Record<MeasureName, { warning: number, critical: number }>>

/** Whether a value is past a limit in the row's direction (strictly: a value at the limit is not). */
export function crosses (comparison: Comparison, value: number, limit: number): boolean {
  return comparison === 'above' ? value > limit : value < limit
}

/**
 * The level of a value against a row of the table (or the limits given for it); `ok` when there is no value to judge.
 */
export function levelOf (measure: MeasureName, value: number | null, limits: Limits = {}): Level {
  return levelAgainst(threshold(measure), value, limits[measure])
}

/** The level of a value against a row (or the limits given for it); `ok` when there is no value to judge. */
export function levelAgainst (
  row: Threshold,
  value: number | null,
  limits: { warning: number, critical: number } = row
): Level {
  if (value === null) return 'ok'
  if (crosses(row.comparison, value, limits.critical)) return 'critical'
  if (crosses(row.comparison, value, limits.warning)) return 'warning'
  return 'ok'
}

/** The priority a row's level routes to (P1 and P2 page, P3 and P4 open a ticket); none when ok. */
export function priorityOf (row: Threshold, level: Level): Priority | null {
  return level === 'ok' ? null : row.priority[level]
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

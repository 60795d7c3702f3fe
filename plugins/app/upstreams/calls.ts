import type { UpstreamName } from '../../../integrations/registry.js'
import type { SlidingWindow, WindowSummary } from '../../../lib/sliding-window.js'
import { HISTOGRAMS } from '../monitoring/metrics.js'
import { combinedFailureRate, highest, windowed, type Reading } from '../monitoring/alerts.js'
import type { MonitoringSource } from '../monitoring/index.js'
import { ROWS, threshold, type MeasureName } from '../monitoring/thresholds.js'

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** Every upstream call's duration and outcome over the recent window. */
    upstreams: Record<UpstreamName, WindowSummary>
  }
}

/**
 * The slower of several upstreams' p95, each judged only on enough calls of its own: a few slow
 * calls to one upstream must not stand for it while the other has plenty.
 */
function slowest (windows: WindowSummary[], what: string): Reading {
  const { minSamples } = threshold('crm_billing_response_time')
  const known = windows.filter((window) => window.p95 !== null)
  const judged = known.filter((window) => window.count >= (minSamples ?? 0))
  const pool = judged.length > 0 ? judged : known
  const value = highest(pool.map((window) => window.p95))
  return windowed(value, Math.max(0, ...pool.map((window) => window.count)), what)
}

type CallReadings = Partial<Record<MeasureName, (calls: Record<string, WindowSummary>) => Reading>>

/**
 * The rows of the thresholds table that judge one upstream's response time (a percentile of the
 * upstream call histogram of that upstream alone), each read from that upstream's call window.
 */
function responseTimeReadings (): CallReadings {
  const readings: CallReadings = {}
  for (const { measure, prometheus } of ROWS) {
    if (prometheus.kind !== 'quantile' || prometheus.histogram !== HISTOGRAMS.upstream.name) continue
    const upstream = prometheus.match?.upstream
    if (typeof upstream !== 'string') continue
    readings[measure as MeasureName] = (calls) => windowed(calls[upstream]?.p95 ?? null, calls[upstream]?.count ?? 0, `${upstream} calls`)
  }
  return readings
}

/** Every upstream call's duration and outcome over the recent window, judged on response times and errors. */
export function callsPart (
  windows: ReadonlyMap<string, SlidingWindow>
): MonitoringSource<Record<UpstreamName, WindowSummary>> {
  return {
    description: 'the upstream calls',
    read: () =>
      Object.fromEntries([...windows].map(([name, window]) => [name, window.summary()])) as Record<
        UpstreamName,
        WindowSummary
      >,
    measures: {
      crm_billing_response_time: (calls) => slowest([calls.crm, calls.billing], 'CRM or billing calls'),
      ...responseTimeReadings(),
      external_error_rate: (calls) => {
        const windows = Object.values(calls)
        return windowed(
          combinedFailureRate(windows),
          windows.reduce((sum, window) => sum + window.count, 0),
          'upstream calls'
        )
      }
    }
  }
}

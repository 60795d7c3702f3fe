import fp from 'fastify-plugin'
import type { FastifyInstance, RouteOptions } from 'fastify'
import type { WindowSummary } from '../../../lib/sliding-window.js'
import { traceIdsOfWork, tracingEnabled } from '../../../lib/tracing.js'
import { windowed, type Reading } from './alerts.js'
import { ServiceMetrics, type Sample } from './metrics.js'
import { thresholdsOf, type MeasureName } from './thresholds.js'
import type { Limits } from './levels.js'
import type { RowSource } from './upstream-rows.js'
import type { Threshold } from './threshold-row.js'
import { Monitoring } from './monitoring.js'

export { Monitoring, SCRAPE_WAIT_MS, UNATTENDED_DATABASE_READ_MS, type MonitoringOptions } from './monitoring.js'

/**
 * The parts of a monitoring snapshot, each reported by the plugin that owns the concern: a plugin
 * adds its part to this interface (declaration merging) and registers its source.
 */
export interface MonitoringParts {
  /** Finished requests, probes excepted, over the recent window. */
  http: WindowSummary
}

export type PartName = keyof MonitoringParts

/** A metric read at scrape time from one part of the snapshot; no samples while the part is unavailable. */
export interface PartMetric<T> {
  name: string
  help: string
  type: 'gauge' | 'counter'
  samples: (part: T) => Sample[]
}

/** What one concern reports to the monitoring. */
export interface MonitoringSource<T> {
  /** What the part is, for the note of a measure left without data: "the provisioning job queue". */
  description: string
  /**
   * Read once per snapshot; a read that fails or takes longer than the monitoring's read timeout
   * leaves the part unavailable to that snapshot's measures. Its metrics: none after a failure, the
   * last value read after a late read.
   */
  read: () => T | Promise<T>
  /**
   * The read queries PostgreSQL: an evaluation nobody asked for (the timer's) reads it at most every
   * UNATTENDED_DATABASE_READ_MS and serves it as last read between, so that a service left alone,
   * or under nothing but probes, commits nothing but the probes' work (decision 0093).
   */
  queriesDatabase?: boolean
  /** The rows of the thresholds table this part gives a value to. */
  measures?: Partial<Record<MeasureName, (part: T) => Reading>>
  metrics?: Array<PartMetric<T>>
}

/** Every part read at one moment; an unavailable part is missing. */
export interface MonitoringSnapshot {
  timestamp: string
  parts: Partial<MonitoringParts>
}

declare module 'fastify' {
  interface FastifyInstance {
    /** This instance's prom-client registry and the recorders of the windowed measures. */
    metrics: ServiceMetrics
    /** The live measures of the thresholds table, read from the sources the plugins register. */
    monitoring: Monitoring
  }
}

/** How often the measures are judged even when nobody looks, so that a change is logged when it happens. */
export const EVALUATION_INTERVAL_MS = 30_000

/** The routes the request metrics know, taken once every route is known: a scope may mark its routes as probes late. */
function knowRoutes (fastify: FastifyInstance, metrics: ServiceMetrics): void {
  const routes: RouteOptions[] = []
  fastify.addHook('onRoute', (route) => { routes.push(route) })
  fastify.addHook('onReady', async () => {
    for (const route of routes.splice(0)) {
      if (route.config?.probe === true) continue
      for (const method of [route.method].flat()) metrics.knowRoute(route.url, method)
    }
  })
}

/** The limits the settings give, as gauges, for the rules to compare with. */
function exportLimits (metrics: ServiceMetrics, rows: readonly Threshold[], limits: Limits): void {
  for (const row of rows) {
    for (const level of ['warning', 'critical'] as const) {
      const exported = row.configurable?.[level]
      if (exported === undefined) continue
      const value = limits[row.measure as MeasureName]?.[level] ?? row[level]
      const help = `The ${level} limit of ${row.measure} (${exported.setting}), in ${row.unit}`
      metrics.live(exported.metric, help, 'gauge', async () => [{ value }])
    }
  }
}

async function monitoring (fastify: FastifyInstance, { upstreams }: { upstreams: readonly RowSource[] }) {
  if (fastify.hasDecorator('monitoring')) throw new Error('The monitoring plugin is already registered')
  // Exemplars name traces: kept only while there are traces to name.
  const exemplars = tracingEnabled()
  const metrics = new ServiceMetrics({ exemplars })
  // A part bounded by the health-check timeout itself (the core checks) answers within it.
  const { HEALTH_CHECK_TIMEOUT_MS, ORDERS_PENDING_WARNING_S, ORDERS_PENDING_CRITICAL_S } = fastify.config
  const limits: Limits = {
    orders_pending_age: { warning: ORDERS_PENDING_WARNING_S, critical: ORDERS_PENDING_CRITICAL_S }
  }
  const instance = new Monitoring({
    metrics,
    log: fastify.log,
    readTimeoutMs: HEALTH_CHECK_TIMEOUT_MS + 250,
    limits,
    rows: thresholdsOf(upstreams)
  })
  fastify.decorate('metrics', metrics)
  fastify.decorate('monitoring', instance)
  fastify.decorate('requestObserver', (request, reply, durationMs) => {
    metrics.observeHttpRequest(
      request.routeOptions.url ?? 'unmatched',
      request.method,
      reply.statusCode,
      durationMs,
      exemplars ? traceIdsOfWork(request) : undefined
    )
  })
  knowRoutes(fastify, metrics)
  metrics.live(
    'portal_bff_monitoring_reading_age_seconds',
    'Seconds since each part of the monitoring was last read; a scrape serves a part that does not answer in time as last read',
    'gauge',
    async () => instance.ages().map(({ part, seconds }) => ({ labels: { part }, value: seconds }))
  )
  exportLimits(metrics, instance.rows, limits)
  instance.register('http', {
    description: 'the request log',
    read: () => metrics.httpRequests.summary(),
    measures: {
      api_response_time_p95: (http) => windowed(http.p95, http.count, 'requests'),
      http_5xx_rate: (http) => windowed(http.failureRate, http.count, 'requests')
    }
  })

  const timer = setInterval(() => {
    instance
      .evaluate({ unattended: true })
      .catch((error: unknown) => fastify.log.warn({ err: error }, 'alert evaluation failed'))
  }, EVALUATION_INTERVAL_MS)
  timer.unref()
  fastify.addHook('onClose', async () => clearInterval(timer))
}

export default fp(monitoring, { name: 'monitoring', fastify: '5.x', decorators: { fastify: ['config'] } })

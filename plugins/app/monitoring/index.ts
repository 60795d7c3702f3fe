import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance, RouteOptions } from 'fastify'
import type { WindowSummary } from '../../../lib/sliding-window.js'
import { traceIdsOfWork, tracingEnabled } from '../../../lib/tracing.js'
import { ChangeLog, judge, windowed, type Judgement, type Reading, type Readings } from './alerts.js'
import { ServiceMetrics, type Sample } from './metrics.js'
import { THRESHOLDS, thresholdsOf, type MeasureName } from './thresholds.js'
import type { Limits } from './levels.js'
import type { Threshold } from './threshold-row.js'
import type { RowSource } from './upstream-rows.js'

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

interface RegisteredSource {
  /** Reads the part into each of `targets`; leaves them as they are when it takes too long, and forgets its last value when it fails. */
  read: (targets: Array<Partial<MonitoringParts>>, timeoutMs: number) => Promise<void>
  queriesDatabase: boolean
  readings: (parts: Partial<MonitoringParts>, into: Partial<Readings>) => void
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

/** How often an evaluation nobody asked for reads the parts that query PostgreSQL: the reconciliation's default interval. */
export const UNATTENDED_DATABASE_READ_MS = 300_000

/**
 * The longest a scrape waits for a fresh reading. A part that has not answered by then is served
 * as last read (its age is a metric of its own): a hung dependency must not make scrapes time out,
 * or the alert about it would never fire.
 */
export const SCRAPE_WAIT_MS = 150

/** The work's result; `failed` when it fails, `late` when it takes longer than `ms`. */
async function bounded<T> (work: () => T | Promise<T>, ms: number): Promise<{ value: T } | 'failed' | 'late'> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<'late'>((resolve) => { timer = setTimeout(() => resolve('late'), ms) })
  try {
    return await Promise.race([Promise.resolve().then(work).then((value) => ({ value }), () => 'failed' as const), timeout])
  } finally {
    clearTimeout(timer)
  }
}

export interface MonitoringOptions {
  metrics: ServiceMetrics
  log: FastifyBaseLogger
  /** How long one part's read may take. */
  readTimeoutMs: number
  /** Rows whose limits the settings move from the table's defaults. */
  limits?: Limits
  /** The thresholds table: the product's, or the one of the service's upstream registry. */
  rows?: readonly Threshold[]
}

export class Monitoring {
  readonly #sources = new Map<PartName, RegisteredSource>()
  readonly #metrics: ServiceMetrics
  readonly #changes: ChangeLog
  readonly #readTimeoutMs: number
  readonly #limits: Limits
  /** The rows judged, in order. */
  readonly rows: readonly Threshold[]
  /** Each part as last read, and when. */
  readonly #latest: Partial<MonitoringParts> = {}
  readonly #readAt = new Map<PartName, number>()
  #inFlight: Promise<MonitoringSnapshot> | undefined
  #readOnce = false
  #recent: Promise<MonitoringSnapshot> | undefined

  constructor ({ metrics, log, readTimeoutMs, limits = {}, rows = THRESHOLDS }: MonitoringOptions) {
    this.rows = rows
    this.#metrics = metrics
    this.#changes = new ChangeLog(log)
    this.#readTimeoutMs = readTimeoutMs
    this.#limits = limits
  }

  /** Adds a concern's part: its reading, the measures it gives values to, and its scrape-time metrics. */
  register<K extends PartName> (part: K, source: MonitoringSource<MonitoringParts[K]>): void {
    if (this.#sources.has(part)) throw new Error(`Monitoring part '${part}' is already registered`)
    const measures = Object.entries(source.measures ?? {}) as Array<[MeasureName, (value: MonitoringParts[K]) => Reading]>
    this.#sources.set(part, {
      queriesDatabase: source.queriesDatabase === true,
      read: async (targets, timeoutMs) => {
        const result = await bounded(source.read, timeoutMs)
        // Failed, the part has no value to serve; late, it is served as last read (with its age).
        if (result === 'failed') delete this.#latest[part]
        if (typeof result === 'string') return
        for (const target of targets) target[part] = result.value
        this.#readAt.set(part, performance.now())
      },
      readings: (parts, into) => {
        const value = parts[part]
        for (const [measure, reading] of measures) {
          into[measure] = value === undefined ? { value: null, note: `no data: ${source.description} did not answer` } : reading(value)
        }
      }
    })
    for (const metric of source.metrics ?? []) {
      this.#metrics.live(metric.name, metric.help, metric.type, async () => {
        // A part too slow for this reading is served as last read, not dropped from the scrape.
        const value = (await this.recent()).parts[part] ?? this.#latest[part]
        return value === undefined ? [] : metric.samples(value)
      })
    }
  }

  /** Every part read once; concurrent callers (a scrape's metrics, say) share one reading. */
  snapshot (): Promise<MonitoringSnapshot> {
    this.#inFlight ??= this.#read().finally(() => { this.#inFlight = undefined })
    return this.#inFlight
  }

  /**
   * A reading within SCRAPE_WAIT_MS: the fresh one when every part answers by then, else each part
   * as last read (the reading goes on, and the next call gets what it finds). Until a reading has
   * ended once there is no last reading to serve: the first is waited for, within the read timeout.
   * The metrics of one scrape share one wait.
   */
  recent (): Promise<MonitoringSnapshot> {
    const waitMs = this.#readOnce ? SCRAPE_WAIT_MS : this.#readTimeoutMs
    this.#recent ??= this.#within(waitMs).finally(() => { this.#recent = undefined })
    return this.#recent
  }

  async #within (waitMs: number): Promise<MonitoringSnapshot> {
    const fresh = this.snapshot()
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), waitMs) })
    try {
      return await Promise.race([fresh, late]) ?? { timestamp: new Date().toISOString(), parts: { ...this.#latest } }
    } finally {
      clearTimeout(timer)
    }
  }

  /** Seconds since each part was last read. */
  ages (): Array<{ part: PartName, seconds: number }> {
    const now = performance.now()
    return [...this.#readAt].map(([part, at]) => ({ part, seconds: (now - at) / 1000 }))
  }

  /**
   * The snapshot judged against the thresholds; a change of level is logged once. `unattended`
   * (the timer's evaluation): a reading in flight is shared, else the parts that query PostgreSQL
   * are served as last read while that is younger than UNATTENDED_DATABASE_READ_MS.
   */
  async evaluate ({ unattended = false } = {}): Promise<{ snapshot: MonitoringSnapshot, judgement: Judgement }> {
    const snapshot = unattended ? await (this.#inFlight ?? this.#read(true)) : await this.snapshot()
    const judgement = judge(this.readings(snapshot), this.#limits, this.rows)
    this.#changes.observe(snapshot.parts.core, judgement)
    return { snapshot, judgement }
  }

  /** Each row's value from a snapshot; a row no registered part measures says so. */
  readings (snapshot: MonitoringSnapshot): Readings {
    const readings: Partial<Readings> = {}
    for (const source of this.#sources.values()) source.readings(snapshot.parts, readings)
    return Object.fromEntries(this.rows.map(({ measure }) => [measure, readings[measure as MeasureName] ?? { value: null, note: 'no data: not measured by this service' }])) as Readings
  }

  async #read (unattended = false): Promise<MonitoringSnapshot> {
    const parts: Partial<MonitoringParts> = {}
    const now = performance.now()
    await Promise.all([...this.#sources].map(async ([part, source]) => {
      const readAt = this.#readAt.get(part)
      if (unattended && source.queriesDatabase && readAt !== undefined && now - readAt < UNATTENDED_DATABASE_READ_MS && part in this.#latest) {
        Object.assign(parts, { [part]: this.#latest[part] })
        return
      }
      await source.read([parts, this.#latest], this.#readTimeoutMs)
    }))
    this.#readOnce = true
    return { timestamp: new Date().toISOString(), parts }
  }
}

/**
 * Loaded first, so that every plugin can register its part and feed the histograms. The HTTP
 * measures are its own: every finished request but the probes'.
 */
async function monitoring (fastify: FastifyInstance, { upstreams }: { upstreams: readonly RowSource[] }) {
  if (fastify.hasDecorator('monitoring')) throw new Error('The monitoring plugin is already registered')
  // Exemplars name traces: kept only while there are traces to name.
  const exemplars = tracingEnabled()
  const metrics = new ServiceMetrics({ exemplars })
  // A part bounded by the health-check timeout itself (the core checks) answers within it.
  const { HEALTH_CHECK_TIMEOUT_MS, ORDERS_PENDING_WARNING_S, ORDERS_PENDING_CRITICAL_S } = fastify.config
  const limits: Limits = { orders_pending_age: { warning: ORDERS_PENDING_WARNING_S, critical: ORDERS_PENDING_CRITICAL_S } }
  const instance = new Monitoring({ metrics, log: fastify.log, readTimeoutMs: HEALTH_CHECK_TIMEOUT_MS + 250, limits, rows: thresholdsOf(upstreams) })
  fastify.decorate('metrics', metrics)
  fastify.decorate('monitoring', instance)
  fastify.decorate('requestObserver', (request, reply, durationMs) => {
    metrics.observeHttpRequest(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode, durationMs, exemplars ? traceIdsOfWork(request) : undefined)
  })
  // Judged once every route is known: a scope may mark its routes as probes after this hook has seen them.
  const routes: RouteOptions[] = []
  fastify.addHook('onRoute', (route) => { routes.push(route) })
  fastify.addHook('onReady', async () => {
    for (const route of routes.splice(0)) {
      if (route.config?.probe === true) continue
      for (const method of [route.method].flat()) metrics.knowRoute(route.url, method)
    }
  })
  metrics.live('portal_bff_monitoring_reading_age_seconds', 'Seconds since each part of the monitoring was last read; a scrape serves a part that does not answer in time as last read', 'gauge', async () =>
    instance.ages().map(({ part, seconds }) => ({ labels: { part }, value: seconds })))
  // The limits the settings give, for the rules to compare with.
  for (const row of instance.rows) {
    for (const level of ['warning', 'critical'] as const) {
      const exported = row.configurable?.[level]
      if (exported === undefined) continue
      const value = limits[row.measure as MeasureName]?.[level] ?? row[level]
      metrics.live(exported.metric, `The ${level} limit of ${row.measure} (${exported.setting}), in ${row.unit}`, 'gauge', async () => [{ value }])
    }
  }
  instance.register('http', {
    description: 'the request log',
    read: () => metrics.httpRequests.summary(),
    measures: {
      api_response_time_p95: (http) => windowed(http.p95, http.count, 'requests'),
      http_5xx_rate: (http) => windowed(http.failureRate, http.count, 'requests')
    }
  })

  const timer = setInterval(() => {
    instance.evaluate({ unattended: true }).catch((error: unknown) => fastify.log.warn({ err: error }, 'alert evaluation failed'))
  }, EVALUATION_INTERVAL_MS)
  timer.unref()
  fastify.addHook('onClose', async () => clearInterval(timer))
}

export default fp(monitoring, { name: 'monitoring', fastify: '5.x', decorators: { fastify: ['config'] } })

import {
  Histogram, Registry, collectDefaultMetrics, type LabelValues, type Metric, type OpenMetricsContentType
} from 'prom-client'
import { UPSTREAMS } from '../../../integrations/registry.js'
import { FAILURE_CLASSES } from '../../../lib/errors.js'
import { SlidingWindow } from '../../../lib/sliding-window.js'

/**
 * The histograms of /metrics. Their buckets include every threshold that is judged on them
 * (thresholds.ts), so a percentile past a threshold is past it in Prometheus too.
 */
export const HISTOGRAMS = {
  http: {
    name: 'portal_bff_http_request_duration_seconds',
    help: 'Duration of HTTP requests, probes excepted, by route pattern, method and status class',
    labelNames: ['method', 'route', 'status_class'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10, 30]
  },
  upstream: {
    name: 'portal_bff_upstream_request_duration_seconds',
    help: `Duration of upstream calls (${UPSTREAMS.map(({ title }) => title).join(', ')}) by upstream and outcome (ok or the failure class)`,
    labelNames: ['upstream', 'outcome'],
    buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 3, 5, 10, 15, 30]
  },
  cacheCommand: {
    name: 'portal_bff_cache_command_duration_seconds',
    help: 'Duration of the services cache\'s Redis commands that Redis answered',
    labelNames: [],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]
  },
  query: {
    name: 'portal_bff_db_query_duration_seconds',
    help: 'Duration of database queries of the business connection pool, by outcome',
    labelNames: ['outcome'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10]
  },
  provisioningLag: {
    name: 'portal_bff_order_provisioning_lag_seconds',
    help: 'Time from a platform event handed off (its provisioning job queued) to its order Active',
    labelNames: [],
    buckets: [0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600]
  }
} as const

export interface Sample {
  labels?: Record<string, string | number>
  value: number
}

/**
 * A metric whose samples are read from the service's own state at scrape time. Unlike a
 * prom-client Gauge it has no sample at all when there is nothing to report (a limit Redis does
 * not have, a queue that is not running), so rules see no value rather than a made-up 0.
 */
class LiveMetric {
  readonly aggregator = 'sum'

  constructor (
    readonly name: string,
    readonly help: string,
    readonly type: 'gauge' | 'counter',
    private readonly read: () => Promise<Sample[]>
  ) {}

  async get () {
    const values = await this.read()
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values: values.map(({ labels = {}, value }) => ({ labels, value }))
    }
  }

  reset (): void {}
}

/** The trace an observation was made in (a sampled request's span), given as its exemplar. */
export interface TraceIds { traceId: string, spanId: string }

type HttpLabel = 'method' | 'route' | 'status_class'

/** A registered metric as prom-client holds it at run time (its types give `type` as an enum, and no `get`). */
interface RegisteredMetric {
  name: string
  help: string
  type: string
  aggregator: string
  get: () => Promise<{ name: string }>
}

/**
 * A metric as the OpenMetrics exposition takes it. A counter's family is named without `_total`
 * there (its samples keep it): prom-client renames the counter object itself when it formats one,
 * which would take the suffix off the Prometheus text too, so a counter is given as a copy.
 */
function forOpenMetrics (metric: RegisteredMetric): RegisteredMetric {
  if (metric.type !== 'counter' || !metric.name.endsWith('_total')) return metric
  const family = metric.name.slice(0, -'_total'.length)
  const { help, type, aggregator } = metric
  return { name: family, help, type, aggregator, get: async () => ({ ...await metric.get(), name: family }) }
}

/**
 * Whether a scraper's Accept header asks for OpenMetrics before Prometheus text, as Prometheus's
 * own client libraries decide: the media types by falling quality, the first of the two formats
 * (in a version they speak) wins; anything else, or no header, is Prometheus text.
 */
export function acceptsOpenMetrics (accept: string | undefined): boolean {
  const ranges = (accept ?? '').split(',').map((range) => {
    const [type = '', ...parameters] = range.split(';').map((part) => part.trim().toLowerCase())
    const parameter = (name: string) => parameters.find((part) => part.startsWith(`${name}=`))?.slice(name.length + 1)
    return { type, version: parameter('version'), quality: Number(parameter('q') ?? 1) }
  }).filter(({ quality }) => quality > 0).sort((a, b) => b.quality - a.quality)
  for (const { type, version } of ranges) {
    if (type === 'application/openmetrics-text' && [undefined, '1.0.0', '0.0.1'].includes(version)) return true
    if (type === 'text/plain' && [undefined, '0.0.4'].includes(version)) return false
  }
  return false
}

const statusClass = (statusCode: number) => `${Math.floor(statusCode / 100)}xx`
const STATUS_CLASSES = ['2xx', '3xx', '4xx', '5xx'] as const

/**
 * The service's metrics registry (one per app instance, so several instances in one process do not
 * clash), with the default process metrics, and the recorders of the measures that are judged over
 * the recent window: every observation feeds both the Prometheus histogram and the window.
 */
export class ServiceMetrics {
  readonly registry = new Registry()
  /** Finished requests, probes excepted: the API p95 and the HTTP 5xx rate. */
  readonly httpRequests = new SlidingWindow()
  readonly #http: Histogram<HttpLabel>
  readonly #exemplars: boolean
  readonly #upstream: Histogram<'upstream' | 'outcome'>
  readonly #cacheCommand: Histogram
  readonly #query: Histogram<'outcome'>
  readonly #provisioningLag: Histogram

  /**
   * `exemplars`: the request-duration histogram keeps, in each bucket, the trace of the last sampled
   * request that fell in it, for the OpenMetrics exposition (while tracing is on).
   */
  constructor ({ exemplars = false }: { exemplars?: boolean } = {}) {
    collectDefaultMetrics({ register: this.registry })
    const registers = [this.registry]
    this.#exemplars = exemplars
    // prom-client refuses exemplars on a Prometheus-text registry: registered by hand, it leaves them out of that text.
    this.#http = new Histogram({
      ...HISTOGRAMS.http,
      labelNames: [...HISTOGRAMS.http.labelNames],
      buckets: [...HISTOGRAMS.http.buckets],
      enableExemplars: exemplars,
      registers: []
    })
    this.registry.registerMetric(this.#http)
    this.#upstream = new Histogram({
      ...HISTOGRAMS.upstream,
      labelNames: [...HISTOGRAMS.upstream.labelNames],
      buckets: [...HISTOGRAMS.upstream.buckets],
      registers
    })
    this.#cacheCommand = new Histogram({
      ...HISTOGRAMS.cacheCommand,
      labelNames: [],
      buckets: [...HISTOGRAMS.cacheCommand.buckets],
      registers
    })
    this.#query = new Histogram({
      ...HISTOGRAMS.query,
      labelNames: [...HISTOGRAMS.query.labelNames],
      buckets: [...HISTOGRAMS.query.buckets],
      registers
    })
    this.#provisioningLag = new Histogram({
      ...HISTOGRAMS.provisioningLag,
      labelNames: [],
      buckets: [...HISTOGRAMS.provisioningLag.buckets],
      registers
    })
    // Every known label set starts at 0: a series born on its first failure has no earlier sample,
    // so rate() and increase() would not see that failure.
    for (const outcome of ['ok', 'error']) this.#query.zero({ outcome })
  }

  /** A route's request series, one per status class, at 0 from the start. */
  knowRoute (route: string, method: string): void {
    for (const statusClass of STATUS_CLASSES) this.#http.zero({ route, method, status_class: statusClass })
  }

  /** An upstream's call series, one per outcome, at 0 from the start. */
  knowUpstream (upstream: string): void {
    for (const outcome of ['ok', ...FAILURE_CLASSES]) this.#upstream.zero({ upstream, outcome })
  }

  /**
   * A finished request; `route` is the route pattern (`unmatched` for a 404), never the raw path.
   * `trace`: its span, when sampled, the exemplar of its bucket.
   */
  observeHttpRequest (route: string, method: string, statusCode: number, durationMs: number, trace?: TraceIds): void {
    this.httpRequests.record(durationMs, statusCode >= 500)
    const labels = { route, method, status_class: statusClass(statusCode) }
    if (!this.#exemplars) {
      this.#http.observe(labels, durationMs / 1000)
      return
    }
    // OpenTelemetry's and Grafana's names; prom-client types exemplar labels as the metric's own.
    const exemplarLabels = (
      trace === undefined ? {} : { trace_id: trace.traceId, span_id: trace.spanId }
    ) as LabelValues<HttpLabel>
    this.#http.observe({ labels, value: durationMs / 1000, exemplarLabels })
  }

  /** `outcome` is `ok` or the failure class. */
  observeUpstreamCall ({
    upstream,
    outcome,
    durationMs
  }: {
    upstream: string
    outcome: string
    durationMs: number
  }): void {
    this.#upstream.observe({ upstream, outcome }, durationMs / 1000)
  }

  observeCacheCommand (durationMs: number): void {
    this.#cacheCommand.observe(durationMs / 1000)
  }

  observeQuery (durationMs: number, failed: boolean): void {
    this.#query.observe({ outcome: failed ? 'error' : 'ok' }, durationMs / 1000)
  }

  observeProvisioningLag (seconds: number): void {
    this.#provisioningLag.observe(seconds)
  }

  /** Adds a metric read at scrape time. `read` must not throw: report no sample instead. */
  live (name: string, help: string, type: 'gauge' | 'counter', read: () => Promise<Sample[]>): void {
    // The registry takes any object with a name and a get(); its type names only its own classes.
    this.registry.registerMetric(new LiveMetric(name, help, type, read) as unknown as Metric)
  }

  /** Prometheus text format 0.0.4. */
  get contentType (): string {
    return this.registry.contentType
  }

  text (): Promise<string> {
    return this.registry.metrics()
  }

  static readonly OPENMETRICS_CONTENT_TYPE = Registry.OPENMETRICS_CONTENT_TYPE

  /** The same metrics in OpenMetrics 1.0.0, the request-duration histogram with its exemplars. */
  openMetricsText (): Promise<string> {
    const openMetrics = new Registry<OpenMetricsContentType>()
    openMetrics.setContentType(Registry.OPENMETRICS_CONTENT_TYPE)
    for (const metric of this.registry.getMetricsAsArray() as unknown as RegisteredMetric[]) {
      openMetrics.registerMetric(forOpenMetrics(metric) as unknown as Metric)
    }
    return openMetrics.metrics()
  }
}

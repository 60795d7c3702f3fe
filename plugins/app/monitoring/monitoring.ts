// The monitoring's reader: the parts the plugins register, read within bounds, kept as last read, and
// judged against the thresholds table.
import type { FastifyBaseLogger } from 'fastify'
import { ChangeLog, judge, type Judgement, type Reading, type Readings } from './alerts.js'
import type { ServiceMetrics } from './metrics.js'
import { THRESHOLDS, type MeasureName } from './thresholds.js'
import type { Limits } from './levels.js'
import type { Threshold } from './threshold-row.js'
import type { MonitoringParts, MonitoringSnapshot, MonitoringSource, PartName } from './index.js'

interface RegisteredSource {
  /**
   * Reads the part into each of `targets`; leaves them as they are when it takes too long, and forgets its
   * last value when it fails.
   */
  read: (targets: Array<Partial<MonitoringParts>>, timeoutMs: number) => Promise<void>
  queriesDatabase: boolean
  readings: (parts: Partial<MonitoringParts>, into: Partial<Readings>) => void
}

/**
 * How often an evaluation nobody asked for reads the parts that query PostgreSQL: the reconciliation's
 * default interval.
 */
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
    const done = Promise.resolve().then(work).then((value) => ({ value }), () => 'failed' as const)
    return await Promise.race([done, timeout])
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
    const measures = Object.entries(source.measures ?? {}) as Array<
      [MeasureName, (value: MonitoringParts[K]) => Reading]
    >
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
    return Object.fromEntries(
      this.rows.map(({ measure }) => [
        measure,
        readings[measure as MeasureName] ?? { value: null, note: 'no data: not measured by this service' }
      ])
    ) as Readings
  }

  async #read (unattended = false): Promise<MonitoringSnapshot> {
    const parts: Partial<MonitoringParts> = {}
    const now = performance.now()
    await Promise.all([...this.#sources].map(async ([part, source]) => {
      const readAt = this.#readAt.get(part)
      if (
        unattended &&
        source.queriesDatabase &&
        readAt !== undefined &&
        now - readAt < UNATTENDED_DATABASE_READ_MS &&
        part in this.#latest
      ) {
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

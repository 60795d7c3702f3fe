import type { QueuedUpstream, QueueSettingName } from '../../../integrations/registry.js'
import { RequestQueue, type QueueMetrics, type RequestQueueOptions } from '../../../lib/request-queue.js'
import type { Config } from '../../../schemas/config.js'
import type { Sample } from '../monitoring/metrics.js'
import type { MonitoringSource } from '../monitoring/index.js'
import type { Reading } from '../monitoring/alerts.js'
import type { Threshold } from '../monitoring/threshold-row.js'
import { queueMeasures, queueRows } from '../monitoring/upstream-rows.js'
import { healthOf, levelAgainst, worstLevel, type Level, type QueueHealth } from '../monitoring/levels.js'
import type { ServiceUpstream } from './index.js'

type Limits = { warning: number, critical: number }

/** A request queue to one upstream, judged by the rows of the thresholds table its descriptor gives. */
export class UpstreamQueue extends RequestQueue {
  readonly #rows: { queueSize: Threshold, failedRequests: Threshold }

  constructor (options: RequestQueueOptions, rows: { queueSize: Threshold, failedRequests: Threshold }) {
    super(options)
    this.#rows = rows
  }

  /** The warning and critical thresholds this queue's health is judged by. */
  get thresholds (): { queueSize: Limits, failedRequests: Limits } {
    const { queueSize, failedRequests } = this.#rows
    return {
      queueSize: { warning: queueSize.warning, critical: queueSize.critical },
      failedRequests: { warning: failedRequests.warning, critical: failedRequests.critical }
    }
  }

  level (): Level {
    return worstLevel([
      levelAgainst(this.#rows.queueSize, this.metrics().queueSize),
      levelAgainst(this.#rows.failedRequests, this.recentFailures())
    ])
  }

  health (): QueueHealth {
    return healthOf(this.level())
  }
}

/** A queue's report: its health, the specification's metrics, and the failures its health is judged on. */
export interface QueueSnapshot {
  health: QueueHealth
  metrics: QueueMetrics
  recentFailedRequests: number
}

function snapshotOf (queue: UpstreamQueue): QueueSnapshot {
  return { health: queue.health(), metrics: queue.metrics(), recentFailedRequests: queue.recentFailures() }
}

/** The upstreams whose calls wait in a queue. */
type QueuedName = QueuedUpstream['name']

/** The queue settings of the registry, read with the others: `BILLING_QUEUE_CONCURRENCY`. */
type QueueSettingValues = { [Setting in QueueSettingName]: number }

declare module '../../../schemas/config.js' {
  interface Config extends QueueSettingValues {}
}

type QueueReports = Record<QueuedName, QueueSnapshot>

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    queues: QueueReports
  }
}

/** A gauge or counter with one sample per queue, labelled with its name. */
function perQueue (name: string, help: string, type: 'gauge' | 'counter', value: (queue: QueueSnapshot) => number) {
  return {
    name,
    help,
    type,
    samples: (queues: QueueReports): Sample[] =>
      Object.entries(queues).map(([queue, report]) => ({ labels: { queue }, value: value(report) }))
  }
}

/** A queue setting's value; the settings schema, made from the same registry, gives each a default. */
function settingOf (config: Config, setting: string): number {
  return (config as unknown as Record<string, number>)[setting]!
}

/** The queue of an upstream, with its settings and the rows its descriptor gives. */
export function queueOf (upstream: ServiceUpstream, config: Config): UpstreamQueue | undefined {
  const { name, queue } = upstream
  if (queue === undefined) return undefined
  const [queueSize, failedRequests] = queueRows([upstream]) as [Threshold, Threshold]
  return new UpstreamQueue({
    name,
    concurrency: settingOf(config, queue.concurrency),
    timeoutMs: settingOf(config, queue.timeoutMs),
    maxSize: settingOf(config, queue.maxSize),
    windowMs: config.QUEUE_HEALTH_WINDOW_MS
  }, { queueSize, failedRequests })
}

/** Each queue's two rows, read from its report. */
function queueReadings (queues: readonly UpstreamQueue[]): MonitoringSource<QueueReports>['measures'] {
  return Object.fromEntries(queues.flatMap(({ name }) => {
    const measures = queueMeasures(name)
    const report = (queues: QueueReports) => (queues as Record<string, QueueSnapshot>)[name]!
    return [
      [measures.queueSize, (queues: QueueReports): Reading => ({ value: report(queues).metrics.queueSize })],
      [measures.failedRequests, (queues: QueueReports): Reading => ({ value: report(queues).recentFailedRequests })]
    ]
  }))
}

const window = 'within QUEUE_HEALTH_WINDOW_MS'
const QUEUE_METRICS = [
  perQueue(
    'portal_bff_queue_size',
    'Requests waiting in the upstream request queue',
    'gauge',
    (queue) => queue.metrics.queueSize
  ),
  perQueue(
    'portal_bff_queue_pending_requests',
    'Requests of the upstream request queue in flight',
    'gauge',
    (queue) => queue.metrics.pendingRequests
  ),
  perQueue('portal_bff_queue_recent_failed_requests', `Failed requests of the upstream request queue ${window}, which its health is judged on`, 'gauge', (queue) => queue.recentFailedRequests),
  perQueue(
    'portal_bff_queue_requests_total',
    'Requests seen by the upstream request queue',
    'counter',
    (queue) => queue.metrics.totalRequests
  ),
  perQueue(
    'portal_bff_queue_requests_completed_total',
    'Requests completed by the upstream request queue',
    'counter',
    (queue) => queue.metrics.completedRequests
  ),
  perQueue(
    'portal_bff_queue_requests_failed_total',
    'Requests failed in the upstream request queue',
    'counter',
    (queue) => queue.metrics.failedRequests
  ),
  perQueue('portal_bff_queue_average_wait_seconds', `Average wait in the upstream request queue ${window}`, 'gauge', (queue) => queue.metrics.averageWaitTime / 1000),
  perQueue('portal_bff_queue_average_execution_seconds', `Average execution time of upstream requests ${window}`, 'gauge', (queue) => queue.metrics.averageExecutionTime / 1000)
]

/** The request queues: their reports, the rows of the thresholds table they are judged by, and their metrics. */
export function queuesPart (queues: readonly UpstreamQueue[]): MonitoringSource<QueueReports> {
  return {
    description: 'the request queues',
    read: () => Object.fromEntries(queues.map((queue) => [queue.name, snapshotOf(queue)])) as QueueReports,
    measures: queueReadings(queues),
    metrics: QUEUE_METRICS
  }
}

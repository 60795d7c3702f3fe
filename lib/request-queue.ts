import PQueue from 'p-queue'
import { abortable } from './abortable.js'
import { UpstreamFailure } from './failure.js'
import { levelOf, threshold, worstLevel, type Level, type MeasureName } from './thresholds.js'

export type QueueHealth = 'healthy' | 'degraded' | 'unhealthy'
const HEALTH_OF_LEVEL: Record<Level, QueueHealth> = { ok: 'healthy', warning: 'degraded', critical: 'unhealthy' }

/** Seed 2.2: counters are cumulative; the two averages are in milliseconds over the recent window. */
export interface QueueMetrics {
  totalRequests: number
  completedRequests: number
  failedRequests: number
  queueSize: number
  pendingRequests: number
  averageWaitTime: number
  averageExecutionTime: number
}

export interface RequestQueueOptions {
  name: string
  concurrency: number
  /** Deadline of one request, waiting and execution together. */
  timeoutMs: number
  /** Requests that may wait; one more is rejected at once. */
  maxSize: number
  /** The recent window over which averages and failures are judged. */
  windowMs: number
  thresholds: { queueSize: MeasureName, failedRequests: MeasureName }
}

export class QueueFullError extends UpstreamFailure {
  constructor (upstream: string) {
    super('upstream_error', upstream, `${upstream} request queue is full`)
    this.name = 'QueueFullError'
  }
}

interface Sample { at: number, waitMs: number, executionMs: number }

// Averages over the most recent samples of the window are as good as over all of them, and memory stays flat.
const MAX_SAMPLES = 10_000

function average (values: number[]): number {
  return values.length === 0 ? 0 : Math.round(values.reduce((sum, value) => sum + value, 0) / values.length)
}

/** Requests to one upstream: bounded concurrency, a bounded wait and the seed's metrics. */
export class RequestQueue {
  readonly #queue: PQueue
  readonly #options: RequestQueueOptions
  #total = 0
  #completed = 0
  #failed = 0
  #samples: Sample[] = []
  #failures: number[] = []

  constructor (options: RequestQueueOptions) {
    this.#options = options
    this.#queue = new PQueue({ concurrency: options.concurrency })
  }

  get name (): string {
    return this.#options.name
  }

  get settings (): Pick<RequestQueueOptions, 'concurrency' | 'timeoutMs' | 'maxSize' | 'windowMs'> {
    const { concurrency, timeoutMs, maxSize, windowMs } = this.#options
    return { concurrency, timeoutMs, maxSize, windowMs }
  }

  /** The warning and critical thresholds this queue's health is judged by. */
  get thresholds (): Record<'queueSize' | 'failedRequests', { warning: number, critical: number }> {
    const limits = (measure: MeasureName) => {
      const { warning, critical } = threshold(measure)
      return { warning, critical }
    }
    return { queueSize: limits(this.#options.thresholds.queueSize), failedRequests: limits(this.#options.thresholds.failedRequests) }
  }

  /**
   * Runs a task when a slot is free. The task gets a signal that aborts at the request's deadline;
   * the request settles by then whatever the task does.
   */
  async run<T> (task: (signal: AbortSignal) => Promise<T>): Promise<T> {
    this.#total++
    if (this.#queue.size >= this.#options.maxSize) {
      this.#recordFailure()
      throw new QueueFullError(this.name)
    }
    // A timer cleared when the request settles: AbortSignal.timeout's cannot be, and would outlive
    // every request by its whole deadline.
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(new DOMException('request deadline passed', 'TimeoutError')), this.#options.timeoutMs)
    const deadline = controller.signal
    const enqueuedAt = performance.now()
    let startedAt: number | undefined
    try {
      const result = await this.#queue.add(({ signal }) => {
        startedAt = performance.now()
        return abortable(task(signal ?? deadline), deadline)
      }, { signal: deadline })
      this.#completed++
      return result as T
    } catch (error) {
      this.#recordFailure()
      if (deadline.aborted) {
        throw new UpstreamFailure('timeout', this.name, `${this.name} request did not complete within ${this.#options.timeoutMs} ms`, { cause: error })
      }
      throw error
    } finally {
      clearTimeout(timer)
      if (startedAt !== undefined) this.#recordSample(startedAt - enqueuedAt, performance.now() - startedAt)
    }
  }

  metrics (): QueueMetrics {
    this.#prune()
    return {
      totalRequests: this.#total,
      completedRequests: this.#completed,
      failedRequests: this.#failed,
      queueSize: this.#queue.size,
      pendingRequests: this.#queue.pending,
      averageWaitTime: average(this.#samples.map((sample) => sample.waitMs)),
      averageExecutionTime: average(this.#samples.map((sample) => sample.executionMs))
    }
  }

  /** Failed requests within the recent window: what health is judged on. */
  recentFailures (): number {
    this.#prune()
    return this.#failures.length
  }

  level (): Level {
    const { queueSize, failedRequests } = this.#options.thresholds
    return worstLevel([levelOf(queueSize, this.#queue.size), levelOf(failedRequests, this.recentFailures())])
  }

  health (): QueueHealth {
    return HEALTH_OF_LEVEL[this.level()]
  }

  /** Resolves when nothing waits or runs, or after the longest a request may take. */
  async drain (): Promise<void> {
    const timeout = AbortSignal.timeout(this.#options.timeoutMs)
    await abortable(this.#queue.onIdle(), timeout).catch(() => {})
  }

  #recordFailure (): void {
    this.#failed++
    this.#failures.push(performance.now())
    if (this.#failures.length > 2 * MAX_SAMPLES) this.#failures = this.#failures.slice(-MAX_SAMPLES)
  }

  #recordSample (waitMs: number, executionMs: number): void {
    this.#samples.push({ at: performance.now(), waitMs, executionMs })
    if (this.#samples.length > 2 * MAX_SAMPLES) this.#samples = this.#samples.slice(-MAX_SAMPLES)
  }

  #prune (): void {
    const oldest = performance.now() - this.#options.windowMs
    if (this.#samples.length > 0 && this.#samples[0]!.at < oldest) this.#samples = this.#samples.filter((sample) => sample.at >= oldest)
    if (this.#failures.length > 0 && this.#failures[0]! < oldest) this.#failures = this.#failures.filter((at) => at >= oldest)
  }
}

import PQueue from 'p-queue'
import { abortable } from './abortable.js'
import { Deadline } from './deadline.js'
import { UpstreamFailure, UpstreamRefusal } from './failure.js'
import { SlidingWindow } from './sliding-window.js'
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

// Averages over the most recent samples of the window are as good as over all of them, and memory stays flat.
const MAX_SAMPLES = 10_000

/** Requests to one upstream: bounded concurrency, a bounded wait and the seed's metrics. */
export class RequestQueue {
  readonly #queue: PQueue
  readonly #options: RequestQueueOptions
  #total = 0
  #completed = 0
  #failed = 0
  /** Requests waiting for a slot whose deadline has not passed (p-queue's size counts expired ones until their turn). */
  #waiting = 0
  /** Tasks running, counted as they start and end (p-queue's `pending` trails by a few microtasks). */
  #running = 0
  readonly #waits: SlidingWindow
  readonly #executions: SlidingWindow
  readonly #failures: SlidingWindow

  constructor (options: RequestQueueOptions) {
    this.#options = options
    this.#queue = new PQueue({ concurrency: options.concurrency })
    this.#waits = new SlidingWindow(options.windowMs, MAX_SAMPLES)
    this.#executions = new SlidingWindow(options.windowMs, MAX_SAMPLES)
    this.#failures = new SlidingWindow(options.windowMs, MAX_SAMPLES)
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
   * Runs a task when a slot is free. The task gets the request's deadline, to hand to its upstream
   * calls (they nest their own timeouts in it) or to read its signal, and the request settles by
   * then whatever the task does (its slot is free once the task heeds the deadline). A request
   * whose deadline passes while it waits leaves the queue then.
   *
   * The deadline is kept here rather than given to p-queue as a signal: p-queue's abort handling
   * (a race promise and two listeners a task) cost more than the rest of the queue together.
   */
  run<T> (task: (deadline: Deadline) => Promise<T>): Promise<T> {
    this.#total++
    // Full means no slot free and no room to wait: with a maxSize of 0, requests run or are refused.
    if (this.#running + this.#waiting >= this.#options.concurrency + this.#options.maxSize) {
      this.#recordFailure()
      return Promise.reject(new QueueFullError(this.name))
    }
    const enqueuedAt = performance.now()
    this.#waiting++
    return new Promise<T>((resolve, reject) => {
      let state: 'waiting' | 'running' | 'settled' = 'waiting'
      const deadline = new Deadline(this.#options.timeoutMs, undefined, () => {
        if (state === 'waiting') {
          // It waited its whole time: that wait is the queue's too, the longest kind of all.
          this.#waiting--
          this.#waits.record(performance.now() - enqueuedAt)
        }
        if (state === 'settled') return
        state = 'settled'
        this.#recordFailure()
        reject(new UpstreamFailure('timeout', this.name, `${this.name} request did not complete within ${this.#options.timeoutMs} ms`))
      })
      this.#queue.add(async () => {
        // Its deadline passed while it waited: the caller has had its answer.
        if (state !== 'waiting') return
        state = 'running'
        this.#waiting--
        this.#running++
        const startedAt = performance.now()
        this.#waits.record(startedAt - enqueuedAt)
        try {
          const result = await task(deadline)
          if (state === 'running') {
            this.#completed++
            resolve(result)
          }
        } catch (error) {
          if (state === 'running') {
            // A refusal is the upstream's answer about this request: the request completed.
            if (error instanceof UpstreamRefusal) this.#completed++
            else this.#recordFailure()
            reject(error)
          }
        } finally {
          state = 'settled'
          this.#running--
          deadline.clear()
          this.#executions.record(performance.now() - startedAt)
        }
      }).catch(reject)
    })
  }

  metrics (): QueueMetrics {
    return {
      totalRequests: this.#total,
      completedRequests: this.#completed,
      failedRequests: this.#failed,
      queueSize: this.#waiting,
      pendingRequests: this.#running,
      averageWaitTime: Math.round(this.#waits.summary().average ?? 0),
      averageExecutionTime: Math.round(this.#executions.summary().average ?? 0)
    }
  }

  /** Failed requests within the recent window: what health is judged on. */
  recentFailures (): number {
    return this.#failures.count()
  }

  level (): Level {
    const { queueSize, failedRequests } = this.#options.thresholds
    return worstLevel([levelOf(queueSize, this.#waiting), levelOf(failedRequests, this.recentFailures())])
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
    this.#failures.record(0)
  }
}

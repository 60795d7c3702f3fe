import { abortable } from './abortable.js'
import { Deadline } from './deadline.js'
import { UpstreamFailure, UpstreamRefusal } from './failure.js'
import { SlidingWindow } from './sliding-window.js'

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
}

export class QueueFullError extends UpstreamFailure {
  constructor (upstream: string) {
    super('upstream_error', upstream, `${upstream} request queue is full`)
    this.name = 'QueueFullError'
  }
}

// Averages over the most recent samples of the window are as good as over all of them, and memory stays flat.
const MAX_SAMPLES = 10_000

/**
 * Requests to one upstream: bounded concurrency, a bounded wait and the seed's metrics.
 *
 * The slots and the wait line are kept here by hand rather than by p-queue, the library first
 * chosen: measured by `npm run bench -- billing-queue`, a bare p-queue alone keeps 0.91 of the rate
 * of calls made directly to a billing upstream that answers at once (its options copy, task symbol,
 * running-task map, clock reads and five events a task), below the 0.95 a queue must keep. The queue
 * needs only a count of running tasks and a line of waiting ones.
 */
export class RequestQueue {
  readonly #options: RequestQueueOptions
  #total = 0
  #completed = 0
  #failed = 0
  #running = 0
  /** Starts of the requests waiting for a slot, oldest first; one leaves when its deadline passes. */
  readonly #waiting: Array<() => Promise<void>> = []
  /** Told when nothing waits or runs any more (drain). */
  readonly #idleListeners: Array<() => void> = []
  readonly #waits: SlidingWindow
  readonly #executions: SlidingWindow
  readonly #failures: SlidingWindow

  constructor (options: RequestQueueOptions) {
    this.#options = options
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

  /**
   * Runs a task when a slot is free. The task gets the request's deadline, to hand to its upstream
   * calls (they nest their own timeouts in it) or to read its signal, and the request settles by
   * then whatever the task does (its slot is free once the task heeds the deadline). A request
   * whose deadline passes while it waits leaves the queue then.
   */
  run<T> (task: (deadline: Deadline) => Promise<T>): Promise<T> {
    this.#total++
    // Full means no slot free and no room to wait: with a maxSize of 0, requests run or are refused.
    if (this.#running + this.#waiting.length >= this.#options.concurrency + this.#options.maxSize) {
      this.#recordFailure()
      return Promise.reject(new QueueFullError(this.name))
    }
    const enqueuedAt = performance.now()
    return new Promise<T>((resolve, reject) => {
      let state: 'waiting' | 'running' | 'settled' = 'waiting'
      // Its promise is not awaited: it settles the request itself, and what runs outside the try cannot throw.
      const start = async (startedAt = performance.now()): Promise<void> => {
        state = 'running'
        this.#running++
        this.#waits.record(startedAt - enqueuedAt, false, startedAt)
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
          const endedAt = performance.now()
          this.#executions.record(endedAt - startedAt, false, endedAt)
          this.#startNext()
        }
      }
      const deadline = new Deadline(this.#options.timeoutMs, undefined, () => {
        if (state === 'waiting') {
          // It waited its whole time: that wait is the queue's too, the longest kind of all.
          this.#waiting.splice(this.#waiting.indexOf(start), 1)
          this.#waits.record(performance.now() - enqueuedAt)
        }
        if (state === 'settled') return
        state = 'settled'
        this.#recordFailure()
        reject(new UpstreamFailure('timeout', this.name, `${this.name} request did not complete within ${this.#options.timeoutMs} ms`))
      })
      // A request waits only while every slot is taken: a slot freed starts the oldest waiting one.
      // One that finds a slot free starts when it came.
      if (this.#running < this.#options.concurrency) start(enqueuedAt)
      else this.#waiting.push(start)
    })
  }

  metrics (): QueueMetrics {
    return {
      totalRequests: this.#total,
      completedRequests: this.#completed,
      failedRequests: this.#failed,
      queueSize: this.#waiting.length,
      pendingRequests: this.#running,
      averageWaitTime: Math.round(this.#waits.summary().average ?? 0),
      averageExecutionTime: Math.round(this.#executions.summary().average ?? 0)
    }
  }

  /** Failed requests within the recent window: what health is judged on. */
  recentFailures (): number {
    return this.#failures.count()
  }

  /** Resolves when nothing waits or runs, or after the longest a request may take. */
  async drain (): Promise<void> {
    if (this.#running + this.#waiting.length === 0) return
    const idle = new Promise<void>((resolve) => { this.#idleListeners.push(resolve) })
    await abortable(idle, AbortSignal.timeout(this.#options.timeoutMs)).catch(() => {})
  }

  #startNext (): void {
    const next = this.#waiting.shift()
    if (next !== undefined) {
      next()
    } else if (this.#running === 0 && this.#idleListeners.length > 0) {
      for (const listener of this.#idleListeners.splice(0)) listener()
    }
  }

  #recordFailure (): void {
    this.#failed++
    this.#failures.record(0)
  }
}

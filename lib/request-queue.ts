import PQueue from 'p-queue'
import { abortable } from './abortable.js'
import { Deadline } from './deadline.js'
import { UpstreamFailure, UpstreamRefusal } from './errors.js'
import { SlidingWindow } from './sliding-window.js'
import { activeContext, failSpan, runWithContext, startChildSpan } from './tracing.js'

/** Specification 2.2: counters are cumulative; the two averages are in milliseconds over the recent window. */
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
 * The request queue to one upstream (billing, CRM), on p-queue: p-queue runs the requests oldest
 * first, at most `concurrency` at once; this class adds what an upstream needs besides — a bounded
 * wait line, one deadline over waiting and running together, and the specification's metrics.
 *
 * A task keeps its slot until it ends, even after its request has answered the caller at the
 * deadline, so that the upstream never has more than `concurrency` calls of this queue in flight.
 * p-queue's `timeout` (which also starts only when the task does) and an abort signal that stays
 * live while the task runs would both free the slot early, so neither is used: the signal handed
 * to `add()` is aborted only while the request waits, to take it out of the line.
 */
export class RequestQueue {
  readonly #options: RequestQueueOptions
  readonly #queue: PQueue
  #total = 0
  #completed = 0
  #failed = 0
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

  /**
   * Runs a task when a slot is free. The task gets the request's deadline, to hand to its upstream
   * calls (they nest their own timeouts in it) or to read its signal, and the request settles by
   * then whatever the task does (its slot is free once the task heeds the deadline). A request
   * whose deadline passes while it waits leaves the queue then.
   */
  run<T> (task: (deadline: Deadline) => Promise<T>): Promise<T> {
    this.#total++
    const { concurrency, maxSize, timeoutMs } = this.#options
    const queue = this.#queue
    // Full means no slot free and no room to wait: with a maxSize of 0, requests run or are refused.
    if (queue.pending + queue.size >= concurrency + maxSize) {
      this.#recordFailure()
      return Promise.reject(new QueueFullError(this.name))
    }
    const enqueuedAt = performance.now()
    // The task runs in the caller's trace, whichever task's end p-queue starts it from; its wait is a span of its own.
    const caller = activeContext()
    const wait = startChildSpan(`${this.name} queue wait`, { attributes: { 'queue.name': this.name } }, caller)
    // Only a request that finds every slot taken waits (p-queue starts any other within add()), and
    // only one that waits needs a signal to leave the line by.
    const leave = queue.pending >= concurrency || queue.size > 0 ? new AbortController() : undefined
    return new Promise<T>((resolve, reject) => {
      let state: 'waiting' | 'running' | 'settled' = 'waiting'
      const deadline = new Deadline(timeoutMs, undefined, () => {
        if (state === 'waiting') {
          leave?.abort()
          if (wait !== undefined) {
            failSpan(wait, undefined, 'timeout')
            wait.end()
          }
          // It waited its whole time: that wait is the queue's too, the longest kind of all.
          this.#waits.record(performance.now() - enqueuedAt)
        }
        if (state === 'settled') return
        state = 'settled'
        this.#recordFailure()
        reject(new UpstreamFailure('timeout', this.name, `${this.name} request did not complete within ${timeoutMs} ms`))
      })
      const execute = async (): Promise<T> => {
        state = 'running'
        const startedAt = leave === undefined ? enqueuedAt : performance.now()
        this.#waits.record(startedAt - enqueuedAt, false, startedAt)
        wait?.end()
        try {
          return await runWithContext(caller, () => task(deadline))
        } finally {
          deadline.clear()
          const endedAt = performance.now()
          this.#executions.record(endedAt - startedAt, false, endedAt)
        }
      }
      // The caller hears from p-queue's promise, which settles after the task has left its slot. It
      // rejects too for a request taken out of the line, already settled by its deadline.
      queue.add(execute, leave && { signal: leave.signal }).then((result) => {
        if (state !== 'running') return
        state = 'settled'
        this.#completed++
        resolve(result)
      }, (error: unknown) => {
        if (state !== 'running') return
        state = 'settled'
        // A refusal is the upstream's answer about this request: the request completed.
        if (error instanceof UpstreamRefusal) this.#completed++
        else this.#recordFailure()
        reject(error)
      })
    })
  }

  metrics (): QueueMetrics {
    return {
      totalRequests: this.#total,
      completedRequests: this.#completed,
      failedRequests: this.#failed,
      queueSize: this.#queue.size,
      pendingRequests: this.#queue.pending,
      averageWaitTime: Math.round(this.#waits.summary().average ?? 0),
      averageExecutionTime: Math.round(this.#executions.summary().average ?? 0)
    }
  }

  /** Failed requests within the recent window: what health is judged on. */
  recentFailures (): number {
    return this.#failures.count()
  }

  /**
   * Resolves when nothing waits or runs, or after the longest a request may take. Its bound is a
   * timer that holds the process open (AbortSignal.timeout's does not): a drain at shutdown, behind
   * a task that never ends, would otherwise let the process exit before the drain returns.
   */
  async drain (): Promise<void> {
    if (this.#queue.pending + this.#queue.size === 0) return
    const bound = new Deadline(this.#options.timeoutMs)
    await abortable(this.#queue.onIdle(), bound.signal).catch(() => {})
    bound.clear()
  }

  #recordFailure (): void {
    this.#failed++
    this.#failures.record(0)
  }
}

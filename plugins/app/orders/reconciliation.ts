import type { FastifyBaseLogger } from 'fastify'
import type { Pool } from 'pg'
import { classifyFailure } from '../../../lib/errors.js'

/** One piece of work the reconciliation does each round, on one instance. */
export interface ReconciliationTask {
  /** Names the task's lease, and its log lines. */
  name: string
  /** `signal` aborts when the service shuts down: a task stops between two pieces of work. */
  run (signal: AbortSignal): Promise<void>
}

export interface ReconciliationOptions {
  pool: Pool
  intervalMs: number
  tasks: ReconciliationTask[]
  /** This instance, as the lease row names its holder. */
  holder: string
  log: FastifyBaseLogger
}

/**
 * The periodic reconciliation of orders with the upstreams: every `intervalMs` each instance offers
 * to run each task, and the one that moves the task's lease row in PostgreSQL forward runs it this
 * round. A lease row, not an advisory lock: it needs no connection held while the upstreams are
 * called, works behind a pooler in transaction mode, and outlives Redis. A holder that dies leaves
 * the lease to run out; the next round on any instance takes it.
 */
export class Reconciliation {
  #timer: NodeJS.Timeout | undefined
  #running: Promise<void> | undefined
  readonly #stopping = new AbortController()

  constructor (private readonly options: ReconciliationOptions) {}

  /** One more task, from the next round on (a plugin registered after this one brings it). */
  add (task: ReconciliationTask): void {
    this.options.tasks.push(task)
  }

  start (): void {
    if (this.#timer !== undefined) return
    this.#timer = setInterval(() => { this.#round() }, this.options.intervalMs).unref()
  }

  /** Stops the rounds, and the one under way after its current piece of work. */
  async stop (): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#stopping.abort()
    await this.#running
  }

  /** One round now, unless one is under way on this instance: every task whose lease this instance takes. */
  runOnce (): Promise<void> {
    this.#running ??= this.#runTasks().finally(() => { this.#running = undefined })
    return this.#running
  }

  #round (): void {
    if (this.#running !== undefined) return
    this.runOnce().catch(() => {})
  }

  async #runTasks (): Promise<void> {
    const { tasks, log } = this.options
    for (const task of tasks) {
      if (this.#stopping.signal.aborted) return
      try {
        if (await this.#takeLease(task.name)) await task.run(this.#stopping.signal)
      } catch (error) {
        log.warn(
          { task: task.name, failure: classifyFailure(error) },
          'a reconciliation round did not finish; the next one takes it up'
        )
      }
    }
  }

  /** True when this instance takes the task's lease for this round (a little under one interval). */
  async #takeLease (task: string): Promise<boolean> {
    const { pool, intervalMs, holder } = this.options
    // A little under one interval: the holder's own next round finds it free again.
    const leaseMs = Math.max(500, intervalMs - 250)
    const { rowCount } = await pool.query(
      `INSERT INTO reconciliation_leases (task, claimed_until, holder) VALUES ($1, now() + $2 * interval '1 millisecond', $3)
       ON CONFLICT (task) DO UPDATE SET claimed_until = EXCLUDED.claimed_until, holder = EXCLUDED.holder
       WHERE reconciliation_leases.claimed_until <= now()`,
      [task, leaseMs, holder])
    return rowCount === 1
  }
}

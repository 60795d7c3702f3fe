/**
 * A task run every so often, one run at a time, whose failures are its own to report; `stop()`
 * waits for the run in flight, so that what it uses can be closed after it.
 */
export class Periodic {
  #running: Promise<void> | undefined
  readonly #timer: NodeJS.Timeout

  constructor (private readonly task: () => Promise<void>, everyMs: number) {
    this.#timer = setInterval(() => { this.run().catch(() => {}) }, everyMs).unref()
  }

  /** Runs the task now, or joins the run in flight. */
  run (): Promise<void> {
    this.#running ??= this.task().finally(() => { this.#running = undefined })
    return this.#running
  }

  async stop (): Promise<void> {
    clearInterval(this.#timer)
    await this.#running
  }
}

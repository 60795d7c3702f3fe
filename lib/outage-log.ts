/** The part of a logger an outage log writes to. */
export interface OutageLogger {
  warn: (details: object, message: string) => void
  info: (details: object, message: string) => void
}

/**
 * One line when a dependency starts failing and one when it is back, whatever the number of errors
 * between: a client that retries every few hundred milliseconds would otherwise write a line per
 * attempt for as long as the outage lasts.
 */
export class OutageLog {
  #errors = 0

  constructor (private readonly log: OutageLogger, private readonly what: string) {}

  error (error: unknown): void {
    if (this.#errors++ === 0) this.log.warn({ err: error }, `${this.what} failing; further errors are counted until it recovers`)
  }

  recovered (): void {
    if (this.#errors === 0) return
    this.log.info({ errors: this.#errors }, `${this.what} recovered`)
    this.#errors = 0
  }

  get errors (): number {
    return this.#errors
  }
}

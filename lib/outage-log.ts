/** The part of a logger an outage log writes to. */
export interface OutageLogger {
  error: (details: object, message: string) => void
  warn: (details: object, message: string) => void
  info: (details: object, message: string) => void
}

export interface OutageLogOptions {
  /** The level of the line that opens an outage: error for a dependency the whole service needs. */
  level?: 'warn' | 'error'
  /** What the service does meanwhile, said once in the opening line. */
  consequence?: string
}

/**
 * One line when a dependency starts failing and one when it is back, whatever the number of errors
 * between: a client that retries every few hundred milliseconds, or every request that needs the
 * dependency, would otherwise write a line per attempt for as long as the outage lasts.
 */
export class OutageLog {
  #errors = 0
  readonly #level: 'warn' | 'error'
  readonly #opening: string

  constructor (
    private readonly log: OutageLogger,
    private readonly what: string,
    { level = 'warn', consequence }: OutageLogOptions = {}
  ) {
    this.#level = level
    this.#opening = `${what} failing${consequence === undefined ? '' : ` (${consequence})`}; further errors are counted until it recovers`
  }

  error (error: unknown): void {
    if (this.#errors++ === 0) this.log[this.#level]({ err: error }, this.#opening)
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

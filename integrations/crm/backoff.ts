/**
 * Exponential backoff with full jitter: the delay after the nth failure in a row is a random part of
 * `initialMs * 2^n`, at most `maxMs`. What counts as a recovery (resetting the count) is the caller's.
 */
export class Backoff {
  /** Failures since the last recovery: the exponent. */
  failures = 0
  readonly initialMs: number
  readonly maxMs: number
  readonly #random: () => number

  /** `random`: the jitter's source (Math.random); a test fixes it to see the bound. */
  constructor (
    { initialMs = 500, maxMs = 30_000 }: { initialMs?: number, maxMs?: number } = {},
    random: () => number = Math.random
  ) {
    this.initialMs = initialMs
    this.maxMs = maxMs
    this.#random = random
  }

  /** The delay after `failures` failures in a row (by default, the count so far). */
  delayMs (failures = this.failures): number {
    return Math.round(this.#random() * Math.min(this.maxMs, this.initialMs * 2 ** failures))
  }
}

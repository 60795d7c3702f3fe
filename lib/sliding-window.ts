export interface WindowSummary {
  count: number
  failures: number
  /** Percent of samples that failed; null when there are none. */
  failureRate: number | null
  average: number | null
  p95: number | null
}

/** Puts the k-th smallest of `values[0..count)` at index k (Hoare's selection), in place. */
function select (values: Float64Array, count: number, k: number): number {
  let low = 0
  let high = count - 1
  while (low < high) {
    const pivot = values[(low + high) >>> 1]!
    let i = low
    let j = high
    while (i <= j) {
      while (values[i]! < pivot) i++
      while (values[j]! > pivot) j--
      if (i <= j) {
        const swap = values[i]!
        values[i] = values[j]!
        values[j] = swap
        i++
        j--
      }
    }
    if (k <= j) high = j
    else if (k >= i) low = i
    else break
  }
  return values[k]!
}

/**
 * Timed samples over a recent window (5 minutes by default): response times with a failed flag,
 * for percentiles and error rates that follow the present. A ring of typed arrays: memory is fixed
 * at `maxSamples` (the oldest give way first), and a summary — read on every scrape, alert
 * evaluation and status poll, over as many samples — allocates nothing and selects the p95 in
 * linear time instead of sorting.
 */
export class SlidingWindow {
  readonly #at: Float64Array
  readonly #values: Float64Array
  readonly #failed: Uint8Array
  readonly #scratch: Float64Array
  #oldest = 0
  #count = 0

  constructor (private readonly windowMs = 300_000, private readonly maxSamples = 20_000) {
    this.#at = new Float64Array(maxSamples)
    this.#values = new Float64Array(maxSamples)
    this.#failed = new Uint8Array(maxSamples)
    this.#scratch = new Float64Array(maxSamples)
  }

  /** `at` is the sample's time, when the caller has just read the clock. */
  record (value: number, failed = false, at = performance.now()): void {
    if (this.#count === this.maxSamples) this.#dropOldest()
    const index = (this.#oldest + this.#count) % this.maxSamples
    this.#at[index] = at
    this.#values[index] = value
    this.#failed[index] = failed ? 1 : 0
    this.#count++
  }

  /** Samples within the window, without summarizing them. */
  count (): number {
    this.#dropExpired()
    return this.#count
  }

  summary (): WindowSummary {
    this.#dropExpired()
    const count = this.#count
    if (count === 0) return { count, failures: 0, failureRate: null, average: null, p95: null }
    let sum = 0
    let failures = 0
    for (let i = 0; i < count; i++) {
      const index = (this.#oldest + i) % this.maxSamples
      this.#scratch[i] = this.#values[index]!
      sum += this.#values[index]!
      failures += this.#failed[index]!
    }
    return {
      count,
      failures,
      failureRate: (100 * failures) / count,
      average: sum / count,
      p95: select(this.#scratch, count, Math.ceil(0.95 * count) - 1)
    }
  }

  #dropExpired (): void {
    const since = performance.now() - this.windowMs
    while (this.#count > 0 && this.#at[this.#oldest]! < since) this.#dropOldest()
  }

  #dropOldest (): void {
    this.#oldest = (this.#oldest + 1) % this.maxSamples
    this.#count--
  }
}

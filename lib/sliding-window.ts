interface Sample { at: number, value: number, failed: boolean }

export interface WindowSummary {
  count: number
  failures: number
  /** Percent of samples that failed; null when there are none. */
  failureRate: number | null
  average: number | null
  p95: number | null
}

/**
 * Timed samples over a recent window (5 minutes by default): response times with a failed flag,
 * for percentiles and error rates that follow the present. Memory is capped at `maxSamples`.
 */
export class SlidingWindow {
  #samples: Sample[] = []

  constructor (private readonly windowMs = 300_000, private readonly maxSamples = 20_000) {}

  record (value: number, failed = false): void {
    this.#samples.push({ at: performance.now(), value, failed })
    if (this.#samples.length > 2 * this.maxSamples) this.#samples = this.#samples.slice(-this.maxSamples)
  }

  summary (): WindowSummary {
    const oldest = performance.now() - this.windowMs
    if (this.#samples.length > 0 && this.#samples[0]!.at < oldest) this.#samples = this.#samples.filter((sample) => sample.at >= oldest)
    const count = this.#samples.length
    if (count === 0) return { count, failures: 0, failureRate: null, average: null, p95: null }
    const values = this.#samples.map((sample) => sample.value).sort((a, b) => a - b)
    const failures = this.#samples.reduce((sum, sample) => sum + (sample.failed ? 1 : 0), 0)
    return {
      count,
      failures,
      failureRate: (100 * failures) / count,
      average: values.reduce((sum, value) => sum + value, 0) / count,
      p95: values[Math.ceil(0.95 * count) - 1] ?? null
    }
  }
}

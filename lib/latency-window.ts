/** The most recent latencies, for an average and a 95th percentile that follow the present. */
export class LatencyWindow {
  readonly #samples: number[] = []
  #next = 0

  constructor (private readonly size = 1000) {}

  record (ms: number): void {
    if (this.#samples.length < this.size) this.#samples.push(ms)
    else this.#samples[this.#next] = ms
    this.#next = (this.#next + 1) % this.size
  }

  get count (): number {
    return this.#samples.length
  }

  average (): number | null {
    if (this.#samples.length === 0) return null
    return this.#samples.reduce((sum, ms) => sum + ms, 0) / this.#samples.length
  }

  percentile (p: number): number | null {
    if (this.#samples.length === 0) return null
    const sorted = [...this.#samples].sort((a, b) => a - b)
    return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null
  }
}

import { AsyncLocalStorage } from 'node:async_hooks'
import { UpstreamFailure, type FailureClass } from '../../../lib/errors.js'

/** An upstream whose last calls failed this many times in a row fails its health check, though its probe answers. */
export const FAILED_CALLS_IN_ROW = 3
/** Calls older than this say nothing of the upstream now: a quiet service is judged on its probe alone. */
export const RECENT_CALLS_MS = 5 * 60_000

const probing = new AsyncLocalStorage<true>()

/**
 * Runs a probe of an upstream (its health check, the CRM's limits refresh): its calls, and those of
 * timers it starts, are not the service's own and are left out of the last calls. A probe that
 * answers says little when the calls the service needs fail (the CRM answers `limits` and refuses
 * every status query).
 */
export function asProbe<T> (work: () => T): T {
  return probing.run(true, work)
}

/** An upstream's run of failed calls, probes left out. */
export class LastCalls {
  #failedInRow = 0
  #lastFailure: FailureClass = 'upstream_error'
  #lastAt = 0

  record (outcome: 'ok' | FailureClass, at = performance.now()): void {
    if (probing.getStore() === true) return
    this.#lastAt = at
    if (outcome === 'ok') {
      this.#failedInRow = 0
      return
    }
    this.#failedInRow++
    this.#lastFailure = outcome
  }

  /**
   * The failure to report when the last FAILED_CALLS_IN_ROW calls failed within RECENT_CALLS_MS; undefined otherwise.
   */
  failing (upstream: string, now = performance.now()): UpstreamFailure | undefined {
    if (this.#failedInRow < FAILED_CALLS_IN_ROW || now - this.#lastAt > RECENT_CALLS_MS) return undefined
    return new UpstreamFailure(this.#lastFailure, upstream, `the last ${this.#failedInRow} calls failed (${this.#lastFailure}), though the health probe answered`)
  }
}

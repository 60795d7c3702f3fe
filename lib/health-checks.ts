import { setTimeout as delay } from 'node:timers/promises'
import { classifyFailure, type FailureKind } from './errors.js'

export type CheckStatus = 'ok' | 'fail'

export interface CheckResult {
  status: CheckStatus
  latencyMs: number
  error?: FailureKind
}

/** A dependency check: resolves when healthy, rejects otherwise; must give up when `signal` aborts. */
export type HealthCheck = (signal: AbortSignal) => Promise<void>

export interface HealthCheckRegistryOptions {
  timeoutMs: number
  /** How long a finished run is reused, so that probes never hammer the dependencies. */
  reuseMs: number
}

/**
 * Named checks run in parallel, each bounded by the timeout. Concurrent callers share the
 * in-flight run, and a finished run is reused for `reuseMs`.
 */
export class HealthCheckRegistry {
  readonly #checks = new Map<string, HealthCheck>()
  readonly #options: HealthCheckRegistryOptions
  #inFlight: Promise<Record<string, CheckResult>> | undefined
  #last: { finishedAt: number, results: Record<string, CheckResult> } | undefined

  constructor (options: HealthCheckRegistryOptions) {
    this.#options = options
  }

  register (name: string, check: HealthCheck): void {
    if (this.#checks.has(name)) throw new Error(`Health check '${name}' is already registered`)
    this.#checks.set(name, check)
    this.#last = undefined
  }

  get names (): string[] {
    return [...this.#checks.keys()]
  }

  /**
   * The last run's results while they may still be reused, else undefined: callers that answer
   * many requests a second take them without a promise, and call `run` only when this is empty.
   */
  get reusable (): Record<string, CheckResult> | undefined {
    const last = this.#last
    return last !== undefined && performance.now() - last.finishedAt < this.#options.reuseMs ? last.results : undefined
  }

  /** The last finished run's results, however old; undefined before the first. */
  get latest (): Record<string, CheckResult> | undefined {
    return this.#last?.results
  }

  run (): Promise<Record<string, CheckResult>> {
    const reusable = this.reusable
    if (reusable !== undefined) return Promise.resolve(reusable)
    this.#inFlight ??= this.#runAll().finally(() => { this.#inFlight = undefined })
    return this.#inFlight
  }

  async #runAll (): Promise<Record<string, CheckResult>> {
    const entries = await Promise.all(
      [...this.#checks].map(async ([name, check]) => [name, await this.#runOne(check)] as const)
    )
    const results = Object.fromEntries(entries)
    this.#last = { finishedAt: performance.now(), results }
    return results
  }

  async #runOne (check: HealthCheck): Promise<CheckResult> {
    const started = performance.now()
    const controller = new AbortController()
    const latencyMs = () => Math.round(performance.now() - started)
    const timeout = delay(this.#options.timeoutMs, undefined, { signal: controller.signal }).then(() => {
      controller.abort()
      return { status: 'fail', latencyMs: latencyMs(), error: 'timeout' } satisfies CheckResult
    })
    const outcome = check(controller.signal).then(
      (): CheckResult => ({ status: 'ok', latencyMs: latencyMs() }),
      (error: unknown): CheckResult => ({ status: 'fail', latencyMs: latencyMs(), error: classifyFailure(error) })
    )
    const result = await Promise.race([outcome, timeout])
    controller.abort()
    return result
  }
}

/** The core health report of the specification (2.1). */
export interface CoreHealth {
  status: 'ok' | 'degraded'
  checks: { database: CheckStatus, cache: CheckStatus }
}

/**
 * The specification's verdict: `ok` when every check is `ok`, `degraded` when one fails; a check that did not
 * run fails.
 */
export function coreHealthOf (results: Record<string, CheckResult>): CoreHealth {
  const checks = { database: results.database?.status ?? 'fail', cache: results.cache?.status ?? 'fail' }
  return { status: checks.database === 'ok' && checks.cache === 'ok' ? 'ok' : 'degraded', checks }
}

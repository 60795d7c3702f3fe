import { Pool } from 'undici'
import type { Dispatcher } from 'undici'
import { Deadline, type Cancellation } from '../lib/deadline.js'
import { currentContext } from '../lib/request-context.js'
import { SpanKind, failSpan, inSpan, propagationHeaders, recording, type Span } from '../lib/tracing.js'
import { classifyUpstreamFailure, UpstreamFailure, UpstreamRefusal, type FailureClass } from '../lib/errors.js'

export interface UpstreamCall {
  /** The upstream's name in the registry (registry.ts). */
  upstream: string
  operation: string
  durationMs: number
  outcome: 'ok' | FailureClass
}

type LogMethod = (details: Record<string, unknown>, message: string) => void

/** The part of a pino logger the clients use. */
export interface UpstreamLogger {
  debug: LogMethod
  info: LogMethod
  warn: LogMethod
  error: LogMethod
}

export interface UpstreamOptions {
  /** Bound on one call, connection and retries included (default 5000 ms). */
  timeoutMs?: number
  /** Told of every call once it has finished, for latency and error metrics. */
  onCall?: (call: UpstreamCall) => void
  log?: UpstreamLogger
}

export interface UpstreamRequest {
  url: string
  method: Dispatcher.HttpMethod
  headers?: Record<string, string>
  body?: string
  signal: AbortSignal
}

export interface UpstreamResponse {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
}

const DEFAULT_TIMEOUT_MS = 5000

const ignore = (): void => {}
const SILENT: UpstreamLogger = { debug: ignore, info: ignore, warn: ignore, error: ignore }

/** Upstream text fit for an error message: one line, short. */
export function brief (text: string): string {
  const line = text.replace(/\s+/g, ' ').trim()
  return line.length > 160 ? `${line.slice(0, 160)}…` : line
}

/** A JSON object (not an array, not null). */
export function isRecord (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

export function asRecord (value: unknown): Record<string, unknown> {
  return isRecord(value) ? value : {}
}

/** An error body's JSON, or undefined when it is not JSON (a proxy's error page, say). */
export function errorBody (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

function networkCode (error: unknown): string | undefined {
  for (
    let current = error;
    typeof current === 'object' && current !== null;
    current = (current as { cause?: unknown }).cause
  ) {
    const { code } = current as { code?: unknown }
    if (typeof code === 'string') return code
  }
  return undefined
}

const DEFAULT_PORTS: Record<string, number> = { 'http:': 80, 'https:': 443 }

/**
 * OpenTelemetry's HTTP client attributes, as its undici instrumentation sets them; `url.full`
 * without credentials, and with every query value redacted (a query may name a customer).
 */
function httpClientAttributes (method: string, target: URL): Record<string, string | number> {
  const url = new URL(target.href)
  url.username = ''
  url.password = ''
  for (const key of new Set(url.searchParams.keys())) url.searchParams.set(key, 'REDACTED')
  return {
    'http.request.method': method,
    'url.full': url.href,
    'server.address': target.hostname,
    'server.port': target.port === '' ? DEFAULT_PORTS[target.protocol] ?? 0 : Number(target.port)
  }
}

/**
 * What the clients share: one connection pool per origin, a deadline on every call, and the one
 * place where a failure is classified, logged and reported.
 */
export class Upstream {
  readonly timeoutMs: number
  readonly log: UpstreamLogger
  readonly #onCall: ((call: UpstreamCall) => void) | undefined
  readonly #pools = new Map<string, Pool>()
  readonly #logged = new WeakSet<UpstreamFailure>()
  #closed = false

  readonly #secrets: string[]

  /** `secrets`: the client's credentials, never to appear in a failure's message (an upstream may echo a request). */
  constructor (readonly name: string, options: UpstreamOptions, secrets: string[] = []) {
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
    this.log = options.log ?? SILENT
    this.#onCall = options.onCall
    // The longest first, so that a secret holding another is hidden whole.
    this.#secrets = secrets.filter((secret) => secret.length >= 4).sort((a, b) => b.length - a.length)
  }

  failure (failure: FailureClass, message: string): UpstreamFailure {
    return new UpstreamFailure(failure, this.name, message)
  }

  /**
   * Runs one operation within `timeoutMs` (and what `until` bounds: a caller's signal, or the
   * deadline the caller runs within). Whatever it throws leaves as an UpstreamFailure; the outcome
   * is reported to `onCall`.
   */
  async call<T> (operation: string, run: (signal: AbortSignal) => Promise<T>, until?: Cancellation): Promise<T> {
    // The span names the upstream and the operation (a billing action, a CRM method and resource),
    // nothing of the request's fields: they may be credentials or personal data. Each HTTP request
    // it makes (a retry, a new token) is a client span under it.
    return await inSpan(`${this.name} ${operation}`, { kind: SpanKind.INTERNAL, attributes: { 'upstream.name': this.name, 'upstream.operation': operation } }, () => this.#call(operation, run, until))
  }

  async #call<T> (operation: string, run: (signal: AbortSignal) => Promise<T>, until?: Cancellation): Promise<T> {
    const started = performance.now()
    const deadline = until instanceof Deadline ? until.nested(this.timeoutMs) : new Deadline(this.timeoutMs, until)
    try {
      const result = await run(deadline.signal)
      this.#report(operation, started, 'ok')
      return result
    } catch (error) {
      const failure = this.#classify(operation, error, deadline, until)
      failure.message = this.#scrub(failure.message)
      if (failure instanceof UpstreamRefusal) {
        const durationMs = this.#report(operation, started, 'ok')
        this.log.warn({ upstream: this.name, operation, durationMs, refused: true }, failure.message)
        throw failure
      }
      const durationMs = this.#report(operation, started, failure.failure)
      // Specification §7: upstream failures appear as errors in the error log.
      if (!this.#logged.has(failure)) {
        this.#logged.add(failure)
        this.log.error({ upstream: this.name, operation, failure: failure.failure, durationMs }, failure.message)
      }
      throw failure
    } finally {
      deadline.clear()
    }
  }

  /** One HTTP request; while its work is traced, an HTTP client span of OpenTelemetry's conventions. */
  async send (request: UpstreamRequest): Promise<UpstreamResponse> {
    if (this.#closed) throw this.failure('upstream_error', `${this.name} client is closed`)
    const target = new URL(request.url)
    if (!recording()) return await this.#send(request, target, undefined)
    return await inSpan(
      request.method,
      { kind: SpanKind.CLIENT, attributes: httpClientAttributes(request.method, target) },
      (span) => this.#send(request, target, span)
    )
  }

  async #send (
    { method, headers, body, signal }: UpstreamRequest,
    { origin, pathname, search }: URL,
    span: Span | undefined
  ): Promise<UpstreamResponse> {
    // The work this call is for (a request, an order's provisioning) is named to the upstream too.
    const context = currentContext()
    // While tracing, the trace goes on too (this request's span, the caller's tracestate and
    // baggage); with tracing off nothing is kept, so no trace is named.
    const propagated = propagationHeaders()
    let sent = propagated === undefined ? headers : { ...headers, ...propagated }
    if (context !== undefined) sent = { ...sent, 'x-correlation-id': context.correlationId }
    const response = await this.#pool(origin).request({ path: `${pathname}${search}`, method, headers: sent, body, signal })
    if (span !== undefined) {
      span.setAttribute('http.response.status_code', response.statusCode)
      if (response.statusCode >= 400) failSpan(span, undefined, String(response.statusCode))
    }
    return { status: response.statusCode, headers: response.headers, text: await response.body.text() }
  }

  /** The body as JSON, or an upstream_error that leaves the body out (it may hold anything). */
  json (response: UpstreamResponse, operation: string): unknown {
    try {
      return JSON.parse(response.text)
    } catch {
      throw this.failure('upstream_error', `${operation}: HTTP ${response.status} answer is not JSON`)
    }
  }

  async close (): Promise<void> {
    this.#closed = true
    const pools = [...this.#pools.values()]
    this.#pools.clear()
    await Promise.all(pools.map(pool => pool.close()))
  }

  #pool (origin: string): Pool {
    let pool = this.#pools.get(origin)
    if (pool === undefined) {
      pool = new Pool(origin, {
        connectTimeout: this.timeoutMs,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs
      })
      this.#pools.set(origin, pool)
    }
    return pool
  }

  #classify (operation: string, error: unknown, deadline: Deadline, until: Cancellation | undefined): UpstreamFailure {
    if (error instanceof UpstreamFailure) return error
    if (deadline.passed) return this.failure('timeout', `${operation}: no answer within ${Math.round(deadline.ms)} ms`)
    if (until?.aborted === true) return this.failure('timeout', `${operation}: abandoned by the caller`)
    const failure = classifyUpstreamFailure(error)
    // The network error's code names the problem; its message may carry host names, so it stays in the cause.
    return new UpstreamFailure(failure, this.name, `${operation}: ${networkCode(error) ?? failure}`, { cause: error })
  }

  #scrub (text: string): string {
    return this.#secrets.reduce((scrubbed, secret) => scrubbed.replaceAll(secret, '[redacted]'), text)
  }

  #report (operation: string, started: number, outcome: UpstreamCall['outcome']): number {
    const durationMs = Math.round(performance.now() - started)
    try {
      this.#onCall?.({ upstream: this.name, operation, durationMs, outcome })
    } catch {
      this.log.error(
        { upstream: this.name, operation },
        'the upstream call observer threw; the call itself is unaffected'
      )
    }
    return durationMs
  }
}

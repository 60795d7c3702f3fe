import {
  DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, context, diag, type Context, type DiagLogger, type SpanStatus,
  type TextMapPropagator
} from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import {
  CompositePropagator, ExportResultCode, W3CBaggagePropagator, W3CTraceContextPropagator, suppressTracing,
  type ExportResult
} from '@opentelemetry/core'
import {
  defaultResource, detectResources, envDetector, hostDetector, osDetector, processDetector, resourceFromAttributes,
  serviceInstanceIdDetector, type Resource, type ResourceDetector
} from '@opentelemetry/resources'
import {
  BatchSpanProcessor, ConsoleSpanExporter, NodeTracerProvider, type ReadableSpan, type Span, type SpanExporter,
  type SpanProcessor
} from '@opentelemetry/sdk-trace-node'
import { currentTrace, outsideAnyWork, runInTrace } from './request-context.js'
import { OutageLog, type OutageLogger } from './outage-log.js'
import { samplerOf } from './tracing-sampler.js'
import { setTracingEnabled } from './tracing.js'
import {
  batchOptionsOf, diagnosticLevelOf, listOf, resourceDetectorsOf, tracingSettingWarnings, type DiagnosticLevel,
  type ExporterName, type ResourceDetectorName
} from './tracing-settings.js'

/*
 * OpenTelemetry's Node SDK, configured by the standard OTEL_* variables alone. Loaded (by a
 * dynamic import in lib/tracing-start.ts) only when an OTLP endpoint is set: otherwise not one of
 * its modules is in the process.
 */

/** The service's logger, as the SDK's own lines are written to it. */
export interface SdkLogger extends OutageLogger {
  debug: (details: object, message: string) => void
  trace: (details: object, message: string) => void
}

export interface Tracing {
  /** What is wrong with the OTEL_* settings, to log at start as the other settings' warnings are. */
  warnings: string[]
  /**
   * Where the exporter's outages and the SDK's diagnostics (OTEL_LOG_LEVEL) are logged, once the service's
   * logger exists.
   */
  logTo (log: SdkLogger): void
  /** Sends the spans still held, within `timeoutMs` at most; tracing is off afterwards. */
  shutdown (timeoutMs: number): Promise<void>
}

const PROTOCOLS = ['http/protobuf', 'http/json'] as const
type Protocol = typeof PROTOCOLS[number]

export class TracingSettingError extends Error {}

function protocolOf (env: NodeJS.ProcessEnv): Protocol {
  const [name, value] = [
    ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', env.OTEL_EXPORTER_OTLP_PROTOCOL]
  ]
    .find(([, setting]) => setting !== undefined && setting.trim() !== '') ?? ['', 'http/protobuf']
  const protocol = value!.trim()
  if ((PROTOCOLS as readonly string[]).includes(protocol)) return protocol as Protocol
  throw new TracingSettingError(`${name} must be one of ${PROTOCOLS.join(', ')} (got "${protocol}")`)
}

/**
 * The OTLP exporter, watched: a collector out of reach is one warning when exports start failing
 * and one line when they succeed again. The exporter never blocks: the batch processor exports
 * from a timer, drops spans once its queue is full, and bounds each export.
 */
class WatchedExporter implements SpanExporter {
  #outage: OutageLog | undefined

  constructor (private readonly exporter: SpanExporter) {}

  logTo (log: OutageLogger): void {
    this.#outage = new OutageLog(log, 'trace exporter: the OTLP collector')
  }

  /**
   * Outside any work: the batch processor's timer was started by whichever span ended first, and
   * its lines would carry that request's ids. Tracing is suppressed for the export's own calls.
   */
  export (spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    outsideAnyWork(() => context.with(suppressTracing(ROOT_CONTEXT), () => {
      this.exporter.export(spans, (result) => {
        if (result.code === ExportResultCode.SUCCESS) this.#outage?.recovered()
        else this.#outage?.error(result.error ?? new Error('export failed'))
        done(result)
      })
    }))
  }

  async shutdown (): Promise<void> {
    await this.exporter.shutdown()
  }

  async forceFlush (): Promise<void> {
    await this.exporter.forceFlush?.()
  }
}

/**
 * OpenTelemetry's context in the request context's AsyncLocalStorage (lib/request-context.ts) instead of a
 * storage of its own: one storage for every piece of work, traced or not (decision 0078, measured
 * when each enabled storage was copied into every promise made). Binding (functions, emitters)
 * stays the library's, written over `with` and `active`.
 */
class SharedContextManager extends AsyncLocalStorageContextManager {
  override active (): Context {
    return (currentTrace() as Context | undefined) ?? ROOT_CONTEXT
  }

  override with<A extends unknown[], F extends (...args: A) => ReturnType<F>> (
    context: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return runInTrace(context, () => fn.apply(thisArg, args))
  }

  /** Not called by the OpenTelemetry API this service uses (1.x): refused, not kept in a storage nothing reads. */
  override attach (): never {
    throw new Error('attach() is not supported: use context.with()')
  }
}

const PROPAGATORS: Record<string, () => TextMapPropagator> = {
  tracecontext: () => new W3CTraceContextPropagator(),
  baggage: () => new W3CBaggagePropagator()
}

/**
 * What carries a trace in and out (OTEL_PROPAGATORS, default `tracecontext,baggage`); null for
 * `none`, which leaves OpenTelemetry's no-op propagator: nothing read, nothing sent.
 */
export function propagatorOf (env: NodeJS.ProcessEnv): TextMapPropagator | null {
  const names = listOf(env.OTEL_PROPAGATORS).filter((name) => name === 'none' || name in PROPAGATORS)
  const chosen = names.length === 0 ? ['tracecontext', 'baggage'] : names
  if (chosen.includes('none')) return null
  return new CompositePropagator({ propagators: [...new Set(chosen)].map((name) => PROPAGATORS[name]!()) })
}

/**
 * A request answered 4xx is not the server's failure (OpenTelemetry's HTTP conventions leave a
 * server span's status unset for it), but @fastify/otel marks the request span failed for every
 * error thrown, a 401 included, before the status code is known. Set right as the span ends
 * (`onEnding`, while it can still change). A 5xx's span gets `error.type`, as the conventions ask:
 * the failure its status names (plugins/external/opentelemetry.ts), or the status code.
 */
class RequestSpanStatus implements SpanProcessor {
  onEnding (span: Span): void {
    if (span.kind !== SpanKind.SERVER || span.status.code !== SpanStatusCode.ERROR) return
    const status = span.attributes['http.response.status_code']
    if (typeof status !== 'number') return
    // setStatus never goes back to unset; the SDK's span keeps its status in a plain field.
    if (status < 500) (span as { status: SpanStatus }).status = { code: SpanStatusCode.UNSET }
    else span.setAttribute('error.type', span.status.message ?? String(status))
  }

  onStart (): void {}
  onEnd (): void {}
  async forceFlush (): Promise<void> {}
  async shutdown (): Promise<void> {}
}

async function otlpExporter (protocol: Protocol): Promise<SpanExporter> {
  // Each reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS and _TIMEOUT itself.
  if (protocol === 'http/json') return new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter()
  return new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter()
}

const DIAGNOSTIC_LEVEL: Record<DiagnosticLevel, DiagLogLevel> = {
  none: DiagLogLevel.NONE,
  error: DiagLogLevel.ERROR,
  warn: DiagLogLevel.WARN,
  info: DiagLogLevel.INFO,
  debug: DiagLogLevel.DEBUG,
  verbose: DiagLogLevel.VERBOSE,
  all: DiagLogLevel.ALL
}

/**
 * OpenTelemetry's diagnostics as the service's log lines, outside any work (the SDK writes them
 * from wherever it is called). Lines written before the logger exists are kept until it does.
 */
class DiagnosticLog implements DiagLogger {
  #log: SdkLogger | undefined
  readonly #early: Array<[keyof SdkLogger, string]> = []

  logTo (log: SdkLogger): void {
    this.#log = log
    for (const [level, message] of this.#early.splice(0)) this.#write(level, message)
  }

  #write (level: keyof SdkLogger, message: string, args: unknown[] = []): void {
    const log = this.#log
    if (log === undefined) {
      if (this.#early.length < 100) this.#early.push([level, message])
      return
    }
    outsideAnyWork(() => log[level](args.length === 0 ? {} : { details: args.map(String) }, `OpenTelemetry: ${message}`))
  }

  error (message: string, ...args: unknown[]): void { this.#write('error', message, args) }
  warn (message: string, ...args: unknown[]): void { this.#write('warn', message, args) }
  info (message: string, ...args: unknown[]): void { this.#write('info', message, args) }
  debug (message: string, ...args: unknown[]): void { this.#write('debug', message, args) }
  verbose (message: string, ...args: unknown[]): void { this.#write('trace', message, args) }
}

const RESOURCE_DETECTORS: Record<ResourceDetectorName, ResourceDetector> = {
  host: hostDetector,
  os: osDetector,
  process: processDetector,
  serviceinstance: serviceInstanceIdDetector,
  env: envDetector
}

/**
 * What every span says of where it was made: the service's name, then what the detectors
 * OTEL_RESOURCE_DETECTORS names find (by default all: `service.instance.id`, `host.*`, `os.*`,
 * `process.*`), then OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, which win. The host's id is
 * read from a file: the exporter waits for it before its first export.
 */
export function resourceOf (env: NodeJS.ProcessEnv, serviceName: string): Resource {
  const detectors = resourceDetectorsOf(env).map((name) => RESOURCE_DETECTORS[name])
  return defaultResource()
    .merge(resourceFromAttributes({ 'service.name': serviceName }))
    .merge(detectResources({ detectors }))
}

/** Starts the SDK, exporting to `exporters`, and registers it as OpenTelemetry's global tracer provider. */
export async function startSdk (
  env: NodeJS.ProcessEnv,
  serviceName: string,
  exporters: ExporterName[]
): Promise<Tracing> {
  const diagnostics = new DiagnosticLog()
  const level = diagnosticLevelOf(env)
  if (level !== undefined && level !== 'none') {
    diag.setLogger(diagnostics, { logLevel: DIAGNOSTIC_LEVEL[level], suppressOverrideMessage: true })
  }
  const otlp = exporters.includes('otlp') ? new WatchedExporter(await otlpExporter(protocolOf(env))) : undefined
  const spanProcessors = [
    new RequestSpanStatus(),
    ...(otlp === undefined ? [] : [new BatchSpanProcessor(otlp, batchOptionsOf(env))]),
    ...(exporters.includes('console') ? [new BatchSpanProcessor(new ConsoleSpanExporter(), batchOptionsOf(env))] : [])
  ]
  const resource = resourceOf(env, serviceName)
  // OTEL_TRACES_SAMPLER / _ARG (default parentbased_always_on), a parent-based one following links too.
  const provider = new NodeTracerProvider({ resource, spanProcessors, sampler: samplerOf(env) })
  provider.register({ contextManager: new SharedContextManager(), propagator: propagatorOf(env) })
  setTracingEnabled(true)
  return {
    warnings: tracingSettingWarnings(env),
    logTo (log) {
      otlp?.logTo(log)
      diagnostics.logTo(log)
    },
    async shutdown (timeoutMs) {
      setTracingEnabled(false)
      let bound: NodeJS.Timeout | undefined
      // A collector that does not answer must not hold the shutdown: past the bound, what is left is dropped.
      await Promise.race([
        provider.shutdown().catch(() => {}),
        new Promise<void>((resolve) => { bound = setTimeout(resolve, timeoutMs).unref() })
      ])
      clearTimeout(bound)
      diag.disable()
    }
  }
}

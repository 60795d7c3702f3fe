import { ROOT_CONTEXT, type Context, type TextMapPropagator } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { CompositePropagator, ExportResultCode, W3CBaggagePropagator, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import { BatchSpanProcessor, NodeTracerProvider, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-node'
import { currentTrace, runInTrace } from './log-context.js'
import { OutageLog, type OutageLogger } from './outage-log.js'
import { setTracingEnabled } from './tracing.js'

/*
 * OpenTelemetry's Node SDK, configured by the standard OTEL_* variables alone. Loaded (by a
 * dynamic import in lib/tracing-start.ts) only when an OTLP endpoint is set: otherwise not one of
 * its modules is in the process.
 */

export interface Tracing {
  /** Where the exporter's outages are logged, once the service's logger exists. */
  logTo (log: OutageLogger): void
  /** Sends the spans still held, within `timeoutMs` at most; tracing is off afterwards. */
  shutdown (timeoutMs: number): Promise<void>
}

const PROTOCOLS = ['http/protobuf', 'http/json'] as const
type Protocol = typeof PROTOCOLS[number]

export class TracingSettingError extends Error {}

function protocolOf (env: NodeJS.ProcessEnv): Protocol {
  const [name, value] = [['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL], ['OTEL_EXPORTER_OTLP_PROTOCOL', env.OTEL_EXPORTER_OTLP_PROTOCOL]]
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

  export (spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.exporter.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) this.#outage?.recovered()
      else this.#outage?.error(result.error ?? new Error('export failed'))
      done(result)
    })
  }

  async shutdown (): Promise<void> {
    await this.exporter.shutdown()
  }

  async forceFlush (): Promise<void> {
    await this.exporter.forceFlush?.()
  }
}

/**
 * OpenTelemetry's context in the log context's AsyncLocalStorage (lib/log-context.ts) instead of a
 * storage of its own: one storage for every piece of work, traced or not (decision 0078, measured
 * when each enabled storage was copied into every promise made). Binding (functions, emitters)
 * stays the library's, written over `with` and `active`.
 */
class SharedContextManager extends AsyncLocalStorageContextManager {
  override active (): Context {
    return (currentTrace() as Context | undefined) ?? ROOT_CONTEXT
  }

  override with<A extends unknown[], F extends (...args: A) => ReturnType<F>> (context: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
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
  const names = (env.OTEL_PROPAGATORS ?? '').split(',').map((name) => name.trim().toLowerCase()).filter((name) => name !== '')
  const chosen = names.length === 0 ? ['tracecontext', 'baggage'] : names
  if (chosen.includes('none')) return null
  const propagators = [...new Set(chosen)].filter((name) => name in PROPAGATORS).map((name) => PROPAGATORS[name]!())
  return propagators.length === 0 ? null : new CompositePropagator({ propagators })
}

async function exporterFor (protocol: Protocol): Promise<SpanExporter> {
  // Each reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS and _TIMEOUT itself.
  if (protocol === 'http/json') return new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter()
  return new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter()
}

/** Starts the SDK and registers it as OpenTelemetry's global tracer provider. */
export async function startSdk (env: NodeJS.ProcessEnv, serviceName: string): Promise<Tracing> {
  const exporter = new WatchedExporter(await exporterFor(protocolOf(env)))
  // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the service's own name.
  const resource = defaultResource().merge(resourceFromAttributes({ 'service.name': serviceName })).merge(detectResources({ detectors: [envDetector] }))
  // The sampler comes from OTEL_TRACES_SAMPLER / _ARG (default parentbased_always_on).
  const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter)] })
  provider.register({ contextManager: new SharedContextManager(), propagator: propagatorOf(env) })
  setTracingEnabled(true)
  return {
    logTo: (log) => exporter.logTo(log),
    async shutdown (timeoutMs) {
      setTracingEnabled(false)
      let bound: NodeJS.Timeout | undefined
      // A collector that does not answer must not hold the shutdown: past the bound, what is left is dropped.
      await Promise.race([
        provider.shutdown().catch(() => {}),
        new Promise<void>((resolve) => { bound = setTimeout(resolve, timeoutMs).unref() })
      ])
      clearTimeout(bound)
    }
  }
}

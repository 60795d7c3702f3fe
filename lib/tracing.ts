import {
  context, propagation, trace, SpanKind, SpanStatusCode, TraceFlags, type Attributes, type Context, type Link,
  type Span, type SpanContext
} from '@opentelemetry/api'

/*
 * The service's spans, through OpenTelemetry's API alone. The API is a no-op until an SDK registers
 * a tracer provider (lib/tracing-sdk.ts, loaded only when an endpoint is set); until then every
 * helper here returns at its first line, so that tracing left unset costs a flag's read.
 */
let enabled = false

/** Called once the SDK's tracer provider is registered (and again with false once it is shut down). */
export function setTracingEnabled (on: boolean): void {
  enabled = on
}

export function tracingEnabled (): boolean {
  return enabled
}

const TRACER = 'portal-bff'

function tracer () {
  return trace.getTracer(TRACER)
}

export interface SpanOptions {
  kind?: SpanKind
  attributes?: Attributes
  links?: Link[]
  /** Make the span even without a current span (work of its own: an event's hand-off, a job). */
  root?: boolean
}

/**
 * Whether work under `parent` gets spans of its own: only under a span that records. Without one,
 * a Redis command of the job queue's polling is not a trace of its own; under a span the sampler
 * left out (nine requests in ten at a 0.1 ratio), children would be left out too, and making them
 * would cost as much as the request's own work.
 */
function traced (parent: Context): boolean {
  return trace.getSpan(parent)?.isRecording() === true
}

/** Whether a child span made now would record: checked before building its name and attributes. */
export function recording (): boolean {
  return enabled && traced(context.active())
}

/**
 * Runs `work` in a span, a child of the current one, and ends it with the work's outcome; untraced
 * when the current span does not record, unless `root`.
 */
export async function inSpan<T> (
  name: string,
  options: SpanOptions,
  work: (span: Span | undefined) => Promise<T>
): Promise<T> {
  if (!enabled) return await work(undefined)
  const parent = context.active()
  if (options.root !== true && !traced(parent)) return await work(undefined)
  const span = tracer().startSpan(
    name,
    { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes, links: options.links },
    parent
  )
  try {
    const result = await context.with(trace.setSpan(parent, span), () => work(span))
    span.end()
    return result
  } catch (error) {
    failSpan(span, error)
    span.end()
    throw error
  }
}

/**
 * A span started now and ended by the caller (a wait whose end another callback sees); undefined unless the
 * current span records.
 */
export function startChildSpan (
  name: string,
  options: Omit<SpanOptions, 'root'>,
  parent: Context = context.active()
): Span | undefined {
  if (!enabled || !traced(parent)) return undefined
  return tracer().startSpan(
    name,
    { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes, links: options.links },
    parent
  )
}

/** Marks a span failed, with the error's class as its message: never the error's text, which may hold anything. */
export function failSpan (span: Span, error: unknown, reason?: string): void {
  const name =
    reason ??
    (error instanceof Error
      ? 'failure' in error && typeof error.failure === 'string'
        ? error.failure
        : error.name
      : 'error')
  span.setStatus({ code: SpanStatusCode.ERROR, message: name })
  span.setAttribute('error.type', name)
}

/** The current context, to run a callback in later (a queued task that another task's completion starts). */
export function activeContext (): Context | undefined {
  return enabled ? context.active() : undefined
}

export function runWithContext<T> (saved: Context | undefined, work: () => T): T {
  return saved === undefined ? work() : context.with(saved, work)
}

function currentSpanContext (): SpanContext | undefined {
  const spanContext = trace.getSpan(context.active())?.spanContext()
  return spanContext !== undefined && trace.isSpanContextValid(spanContext) ? spanContext : undefined
}

/**
 * The headers that carry the current trace to an upstream, as the global propagator writes them
 * (W3C trace context and baggage unless OTEL_PROPAGATORS says otherwise); undefined while tracing
 * is off, when no trace is sent at all.
 */
export function propagationHeaders (): Record<string, string> | undefined {
  if (!enabled) return undefined
  const carrier: Record<string, string> = {}
  propagation.inject(context.active(), carrier)
  return carrier
}

/**
 * The W3C traceparent of the current span, kept with work that runs later (a queued job) to link
 * back to it: the service's own record, whatever OTEL_PROPAGATORS sends upstreams. Undefined while
 * tracing is off or no span is current.
 */
export function currentTraceparent (): string | undefined {
  if (!enabled) return undefined
  const spanContext = currentSpanContext()
  if (spanContext === undefined) return undefined
  return `00-${spanContext.traceId}-${spanContext.spanId}-${(spanContext.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? '01' : '00'}`
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** A link to the span a traceparent names (the hand-off that queued a job); undefined for anything else. */
export function linkTo (traceparent: unknown): Link | undefined {
  if (typeof traceparent !== 'string') return undefined
  const match = TRACEPARENT.exec(traceparent)
  if (match === null) return undefined
  const spanContext: SpanContext = {
    traceId: match[1]!,
    spanId: match[2]!,
    traceFlags: Number.parseInt(match[3]!, 16),
    isRemote: true
  }
  return trace.isSpanContextValid(spanContext) ? { context: spanContext } : undefined
}

interface TraceIds { traceId: string, spanId: string }

/** Sampled first: nine spans in ten at a 0.1 ratio are not, and need no validation of their ids. */
function sampledIds (spanContext: SpanContext | undefined): TraceIds | undefined {
  return spanContext === undefined ||
    (spanContext.traceFlags & TraceFlags.SAMPLED) !== TraceFlags.SAMPLED ||
    !trace.isSpanContextValid(spanContext)
    ? undefined
    : { traceId: spanContext.traceId, spanId: spanContext.spanId }
}

/**
 * `traceId` and `spanId` of the current span, for a log line (pino's mixin); nothing outside a span,
 * nor in one the sampler left out: no backend holds that trace.
 */
export function traceIdsOfLine (): TraceIds | undefined {
  return sampledIds(trace.getSpan(context.active())?.spanContext())
}

/** The span each piece of work (a request) ran in, kept while it records, for what is done outside its context. */
const spansOfWork = new WeakMap<object, Span>()

export function keepSpanOf (work: object, span: Span): void {
  spansOfWork.set(work, span)
}

/** The recording span `work` ran in (a request's, to mark its failure from an error hook). */
export function spanOfWork (work: object): Span | undefined {
  return spansOfWork.get(work)
}

/**
 * `traceId` and `spanId` of the span `work` ran in, when sampled: for a line written after it, from
 * another context (an event stream's completion, written by whatever ended the stream).
 */
export function traceIdsOfWork (work: object): TraceIds | undefined {
  return sampledIds(spansOfWork.get(work)?.spanContext())
}

export { SpanKind }
export type { Link, Span }

import fp from 'fastify-plugin'
import type { FastifyError, FastifyInstance, onErrorAsyncHookHandler } from 'fastify'
import { SpanStatusCode } from '@opentelemetry/api'
import { keepSpanOf, spanOfWork, tracingEnabled } from '../../lib/tracing.js'
import { traceCommands } from '../../lib/redis-tracing.js'

/** The request span's attribute naming the request's correlation id, as its log lines do. */
export const CORRELATION_ATTRIBUTE = 'correlation.id'

/** Probe and operator routes: polled every few seconds, they stay out of traces unless TRACE_PROBES. */
const PROBE_PATH = /^\/(health(\/|$|\?)|metrics(\?|$)|status(\/|$|\?)|api\/health\/|auth\/health-check(\?|$))/

export function probePath (url: string): boolean {
  return PROBE_PATH.test(url)
}

const CODE = /^[A-Z0-9][A-Z0-9_]*$/

/**
 * What a failed request's span calls its failure: the error's code (the service's `BILLING_UNAVAILABLE`,
 * Fastify's `FST_ERR_*`, Node's `ECONNREFUSED`), else its failure class, else its class name. Never
 * its message, which the service hides from callers on a 5xx: it may hold a driver's detail, an
 * upstream's text, an address or a credential.
 */
export function failureOfRequest (error: FastifyError & { failure?: unknown }): string {
  if (typeof error.code === 'string' && CODE.test(error.code)) return error.code
  return typeof error.failure === 'string' ? error.failure : error.name
}

/**
 * A span per request, with Fastify's official instrumentation: route template, status, and the
 * correlation id. Registered only while tracing is on, so that its module is not even loaded otherwise.
 * An incoming `traceparent` is the span's parent (the global W3C propagator the SDK registers).
 */
async function opentelemetry (fastify: FastifyInstance) {
  if (!tracingEnabled()) return
  const { FastifyOtelInstrumentation } = await import('@fastify/otel')
  const instrumentation = new FastifyOtelInstrumentation({
    // A span for the request alone: its upstream calls, queue waits and commands are its children.
    instrumentHooks: false,
    instrumentHandler: false,
    // An exception event holds the error's message and stack: the request's log line has them, with the trace id.
    recordExceptions: false,
    ...(!fastify.config.TRACE_PROBES && { ignorePaths: ({ url }) => probePath(url) }),
    requestHook: (span, request) => {
      // A span the sampler left out keeps nothing: naming it would only cost the request.
      if (!span.isRecording()) return
      span.updateName(`${request.method} ${request.routeOptions.url ?? 'unknown route'}`)
      span.setAttribute(CORRELATION_ATTRIBUTE, request.id)
      keepSpanOf(request, span)
    }
  })
  await fastify.register(instrumentation.plugin())
  // The instrumentation describes the span's failure by the error's message, in an onError it adds
  // last to each route: this one goes after it. It runs before the error handler, so a 4xx is
  // marked too, and its status unset as the span ends (lib/tracing-sdk.ts).
  const describeFailure: onErrorAsyncHookHandler = async (request, _reply, error) => {
    spanOfWork(request)?.setStatus({ code: SpanStatusCode.ERROR, message: failureOfRequest(error) })
  }
  fastify.addHook('onRoute', (route) => {
    route.onError = [...[route.onError ?? []].flat(), describeFailure]
  })
  // The shared client (cache, revocations, limits, sessions); BullMQ's own connections stay untraced.
  fastify.addHook('onReady', async () => { traceCommands(fastify.redis) })
}

export default fp(opentelemetry, { name: 'opentelemetry', fastify: '5.x', decorators: { fastify: ['config'] } })

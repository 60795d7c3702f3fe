import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { keepSpanOf, tracingEnabled } from '../../lib/tracing.js'
import { traceCommands } from '../../lib/redis-tracing.js'

/** The request span's attribute naming the request's correlation id, as its log lines do. */
export const CORRELATION_ATTRIBUTE = 'correlation.id'

/** Probe and operator routes: polled every few seconds, they stay out of traces unless TRACE_PROBES. */
const PROBE_PATH = /^\/(health(\/|$|\?)|metrics(\?|$)|status(\/|$|\?)|api\/health\/|auth\/health-check(\?|$))/

export function probePath (url: string): boolean {
  return PROBE_PATH.test(url)
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
  // The shared client (cache, revocations, limits, sessions); BullMQ's own connections stay untraced.
  fastify.addHook('onReady', async () => { traceCommands(fastify.redis) })
}

export default fp(opentelemetry, { name: 'opentelemetry', fastify: '5.x', decorators: { fastify: ['config'] } })

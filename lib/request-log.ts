import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify'
import { levels } from 'pino'
import { traceIdsOfWork, tracingEnabled } from './tracing.js'

export const CORRELATION_HEADER = 'x-correlation-id'

/**
 * What the portal's page may read of an answer besides the safelisted headers: the correlation id, when to
 * retry, the rate limit.
 */
export const EXPOSED_HEADERS = [
  CORRELATION_HEADER,
  'retry-after',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset'
]

const VALID_CORRELATION_ID = /^[A-Za-z0-9._:-]{1,128}$/
export const SLOW_REQUEST_MS = 2000

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Probe routes (health, metrics) log their completion at debug: they are polled. */
    probe?: boolean
  }
  interface FastifyInstance {
    /** Told of every finished request but the probes' (the HTTP measures of the metrics plugin). */
    requestObserver?: (request: FastifyRequest, reply: FastifyReply, durationMs: number) => void
  }
}

function debugEnabled (level: string): boolean {
  return (levels.values[level] ?? Infinity) <= levels.values.debug!
}

/** Ids of the service's own work (lines of no request, an order's provisioning): a client may not send them. */
const RESERVED_CORRELATION_ID = /^(system$|order:)/i

/** The correlation id of an order's work (its hand-off and provisioning): reserved, no client may send it. */
export function orderWorkId (crmOrderId: string): string {
  return `order:${crmOrderId}`
}

/** Fastify's genReqId: the caller's correlation id when it is well formed and not reserved, else a new one. */
export function correlationIdOf (request: IncomingMessage): string {
  const given = request.headers[CORRELATION_HEADER]
  return typeof given === 'string' && VALID_CORRELATION_ID.test(given) && !RESERVED_CORRELATION_ID.test(given)
    ? given
    : randomUUID()
}

/** Answers that an outage explains, the outage logged once where it was noticed. */
const outageAnswers = new WeakSet<FastifyRequest>()

/**
 * The request is answered with a dependency's documented unavailability (a 5xx): its completion
 * line is a warning, for the outage's own line is the one error.
 */
export function answeredDuringOutage (request: FastifyRequest): void {
  outageAnswers.add(request)
}

type ResponseSchemas = Record<string, { content?: Record<string, unknown> } | undefined>

/** A route whose answer is an SSE stream: it lasts as long as its client stays. */
function eventStream (request: FastifyRequest): boolean {
  const responses = request.routeOptions.schema?.response as ResponseSchemas | undefined
  return responses?.['200']?.content?.['text/event-stream'] !== undefined
}

/**
 * One line per finished request, with the fields of the contract's log line; no line when a
 * request arrives. Failures are logged by the error handler, with the error.
 */
export class RequestLogController extends LogController {
  constructor () {
    super({ requestIdLogLabel: 'correlationId' })
  }

  override incomingRequest (): void {}

  override requestCompleted (_error: Error | null, request: FastifyRequest, reply: FastifyReply): void {
    const statusCode = reply.statusCode
    const probe = request.routeOptions.config.probe === true
    const elapsed = reply.elapsedTime
    if (!probe) reply.server.requestObserver?.(request, reply, elapsed)
    const duration = Math.round(elapsed)
    // A stream's length is its client's: one that ended (client gone, logout, shutdown) is no news.
    const slow = duration >= SLOW_REQUEST_MS && !(statusCode === 200 && eventStream(request))
    if (probe && statusCode < 500 && !slow && !debugEnabled(reply.log.level)) return
    const line = {
      duration,
      path: request.url.split('?')[0],
      method: request.method,
      statusCode,
      ...(slow && { slow: true }),
      // An event stream ends from another context (a logout, the shutdown): its request's trace is named here.
      ...(tracingEnabled() && traceIdsOfWork(request))
    }
    const failed = statusCode >= 500 && !probe
    if (failed && !outageAnswers.has(request)) reply.log.error(line, 'request completed')
    else if (slow || failed) reply.log.warn(line, 'request completed')
    else if (probe) reply.log.debug(line, 'request completed')
    else reply.log.info(line, 'request completed')
  }
}

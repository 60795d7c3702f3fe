import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsync } from 'fastify'
import { StreamsUnavailableError, TooManyStreamsError } from '../../../lib/errors.js'
import type { OrderStatusChange } from '../orders/status-changes.js'
import { SseStream } from './stream.js'
import { SseEvent, sseEventSchemas, type OrderStatusEvent } from '../../../schemas/sse-events.js'
import {
  authenticatedErrorResponses, errorResponse, invalidRequestResponse, TOKEN_CHECK_UNAVAILABLE
} from '../../../schemas/error.js'

const EXAMPLE: OrderStatusEvent = {
  orderId: '3f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b',
  crmOrderId: '801000000000001AAA',
  status: 'Active',
  failureReason: null,
  at: '2025-04-01T09:30:00.000Z'
}

// Streams end as their tokens do: a place frees up within seconds on a busy instance.
const STREAMS_RETRY_AFTER_SECONDS = 5
const VALID_EVENT_ID = /^(\d{1,20})-\d{1,20}$/
// Event ids begin with the Redis server's clock in ms; allow for that clock running ahead of ours.
const CLOCK_SKEW_MS = 60_000

/**
 * An id this service could have sent. One from the future would make the stream drop every live
 * event as "already seen", so it is ignored, as garbage is: the stream starts with new events.
 */
function resumableFrameId (header: unknown): string | undefined {
  if (typeof header !== 'string') return undefined
  const match = VALID_EVENT_ID.exec(header)
  return match !== null && Number(match[1]) <= Date.now() + CLOCK_SKEW_MS ? header : undefined
}

/**
 * Server-sent events: the caller's order status changes, from any instance. `Last-Event-ID`
 * resumes from the client's short backlog; a comment line every 15 s keeps proxies from
 * closing an idle stream.
 */
const streamRoutes: FastifyPluginAsync = async (fastify) => {
  const { SSE_MAX_STREAMS_PER_USER } = fastify.config
  for (const schema of sseEventSchemas) fastify.addSchema(schema)
  fastify.get('/api/events', {
    // The stream never ends, so a HEAD of it would never send its headers: GET only.
    exposeHeadRoute: false,
    // An open stream does not renew its session, so neither does opening or reopening one: a tab
    // left open, or one whose reconnections the cap refuses, would otherwise never idle out.
    config: { renewsSession: false },
    schema: {
      operationId: 'streamEvents',
      tags: ['events'],
      summary: 'Server-sent events: `order.status` whenever one of the caller\'s orders changes status',
      description: 'Each event has an `id:`; reconnect with `Last-Event-ID` to receive what was missed. The stream drops when the cache fails; clients reconnect. A browser opens it with a native `EventSource` and the session cookie (`withCredentials: true` from `CORS_ORIGIN`); its automatic reconnection resumes through `Last-Event-ID`. It ends with `event: session.ended` when its token or session is signed out (on any instance, sign-out everywhere included), expires, idles out or is lost (the end of a session is noticed within seconds); a reconnection then gets 401, which stops an `EventSource`; and with `event: shutdown` when the instance shuts down (reconnect: another instance answers).',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      headers: {
        type: 'object',
        properties: { 'last-event-id': { type: 'string', maxLength: 64 } }
      },
      response: {
        200: {
          description: '`text/event-stream`: `order.status` events, a `: heartbeat` comment every 15 s, and `session.ended` or `shutdown` as the last event. Each event is an `SseEvent`; the JSON of its `data:` line, `OrderStatusEvent`, `SessionEndedEvent` or `ShutdownEvent`. On the wire the example reads `retry: 3000`, a blank line, then `id: 1743499800000-0`, `event: order.status` and `data: {"orderId":…}`, each event ending with a blank line',
          content: {
            'text/event-stream': {
              schema: Type.Ref(SseEvent),
              // The example is an event as the schema reads it; its lines on the wire are in the description.
              example: { id: '1743499800000-0', event: 'order.status', data: EXAMPLE }
            }
          }
        },
        ...authenticatedErrorResponses,
        ...invalidRequestResponse,
        429: errorResponse(
          'The caller holds `SSE_MAX_STREAMS_PER_USER` open streams on this instance (`TOO_MANY_STREAMS`); close one first. Or too many requests (`RATE_LIMITED`)'
        ),
        503: errorResponse(`This instance holds \`SSE_MAX_STREAMS\` open streams (\`STREAMS_UNAVAILABLE\`): retry after \`retry-after\` seconds, as a balancer may send you to another; or ${TOKEN_CHECK_UNAVAILABLE}`)
      }
    }
  }, async (request, reply) => {
    const { clientId, jti, exp } = request.user
    const resumeFrom = resumableFrameId(request.headers['last-event-id'])
    const { orders: { statusChanges }, sseStreams } = fastify
    const owner = { clientId, jti, exp, session: request.session !== undefined }
    const stream = new SseStream(owner, reply.raw, sseStreams, statusChanges, resumeFrom)
    const refusal = stream.open()
    if (refusal === 'user_limit') throw new TooManyStreamsError(SSE_MAX_STREAMS_PER_USER)
    if (refusal === 'instance_limit') {
      reply.header('retry-after', STREAMS_RETRY_AFTER_SECONDS)
      throw new StreamsUnavailableError()
    }
    request.raw.on('close', () => stream.disconnected())
    // A client that went away while its token was checked has closed already: no 'close' is to come.
    if (request.raw.socket.destroyed) {
      stream.disconnected()
      reply.hijack()
      return
    }

    reply.hijack()
    const headersSoFar = Object.entries(reply.getHeaders()).filter(
      (entry): entry is [string, string | number | string[]] => entry[1] !== undefined
    )
    reply.raw.writeHead(200, {
      ...Object.fromEntries(headersSoFar),
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no'
    })
    // The headers go out on their own: Node keeps the head it built header by header for the
    // response's life, and writing it alone flattens it (2 KB a stream less than when it is
    // joined to the first frame).
    reply.raw.flushHeaders()
    reply.raw.write('retry: 3000\n\n')
    let backlog: OrderStatusChange[] = []
    if (resumeFrom !== undefined) {
      try {
        backlog = await statusChanges.backlog(stream.owner.clientId, resumeFrom)
      } catch (error) {
        request.log.warn({ err: error }, 'event backlog unavailable: the stream starts with new events')
      }
    }
    stream.goLive(backlog)
  })
}

export default streamRoutes

import { randomUUID } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify'
import { DatabaseUnavailableError, MethodNotAllowedError, NotFoundError, isDatabaseUnavailable, isPublicError } from '../../lib/errors.js'
import { CORRELATION_HEADER, answeredDuringOutage } from '../../lib/request-log.js'
import { ErrorResponse } from '../../schemas/error.js'
import { EXPOSED_HEADERS } from '../external/security-headers.js'

export function errorBody (request: FastifyRequest, statusCode: number, code: string, message: string): ErrorResponse {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, code, correlationId: request.id }
}

const CLIENT_ERRORS: Record<string, { statusCode: number, code: string, message: string }> = {
  ERR_HTTP_REQUEST_TIMEOUT: { statusCode: 408, code: 'REQUEST_TIMEOUT', message: 'The request did not arrive whole in time' },
  HPE_HEADER_OVERFLOW: { statusCode: 431, code: 'HEADERS_TOO_LARGE', message: 'The request headers are too large' }
}
const MALFORMED = { statusCode: 400, code: 'MALFORMED_REQUEST', message: 'The request is not valid HTTP' }

/**
 * Fastify's `clientErrorHandler`: a request Node's HTTP parser refused (a bad header or method,
 * headers too large, a request that never arrived whole) never reaches a route or hook. It gets the
 * service's error shape and a correlation id too, then the connection closes, as Node's own does.
 */
export function handleClientError (error: Error & { code?: string }, socket: Socket, log: FastifyBaseLogger): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const { statusCode, code, message } = CLIENT_ERRORS[error.code ?? ''] ?? MALFORMED
  const correlationId = randomUUID()
  log.info({ correlationId, statusCode, code, parserError: error.code, remoteAddress: socket.remoteAddress }, 'request refused before routing')
  const status = STATUS_CODES[statusCode] ?? 'Error'
  const body = JSON.stringify({ statusCode, error: status, message, code, correlationId } satisfies ErrorResponse)
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${statusCode} ${status}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n${CORRELATION_HEADER}: ${correlationId}\r\nConnection: close\r\n\r\n${body}`)
  }
  socket.destroy(error)
}

/**
 * A database that cannot be reached is `DATABASE_UNAVAILABLE`. An error that already carries a 4xx
 * is the client's (a body cut off by the client is an ECONNRESET with 400), whatever its code says.
 */
function toServiceError (error: FastifyError): FastifyError {
  const clientError = error.statusCode !== undefined && error.statusCode < 500
  return !clientError && isDatabaseUnavailable(error) ? new DatabaseUnavailableError({ cause: error }) : error
}

/**
 * Refusals of a dependency in an outage, each logged once for the whole outage where it is
 * noticed (the token blacklist's outage log, the database check's): a line per request would bury it.
 */
const OUTAGE_CODES = new Set(['AUTH_UNAVAILABLE', 'DATABASE_UNAVAILABLE'])

/**
 * The methods the app's routes serve at a request's path, asked of Fastify's router (`findRoute`
 * matches a path as a request's would be): none when no route takes the path. OPTIONS is left
 * out: its only route is the CORS plugin's on every path, which answers preflights and passes any
 * other OPTIONS request on to this handler.
 */
function methodsServedAt (fastify: FastifyInstance, methods: Iterable<string>, path: string): string[] {
  return [...methods].filter((method) => method !== 'OPTIONS' && fastify.findRoute({ method: method as HTTPMethods, url: path }) !== null).sort()
}

async function errorHandler (fastify: FastifyInstance) {
  fastify.addSchema(ErrorResponse)
  const portalOrigins = new Set(fastify.config.corsOrigins)
  // Every method some route serves, from the routes of every scope (this hook is the root's).
  const methods = new Set<string>()
  fastify.addHook('onRoute', (route) => { for (const method of [route.method].flat()) methods.add(method) })

  // A path no route takes lies outside the browser-facing scope and its CORS hook: the portal's
  // page must still read the 404 (or 405), not a network error. A path served by other methods
  // answers 405 with them in Allow (RFC 9110, 15.5.6).
  function notFound (request: FastifyRequest, reply: FastifyReply): FastifyReply {
    const origin = request.headers.origin
    if (origin !== undefined && portalOrigins.has(origin)) {
      reply.headers({
        'access-control-allow-origin': origin,
        'access-control-allow-credentials': 'true',
        'access-control-expose-headers': EXPOSED_HEADERS.join(', '),
        vary: 'Origin'
      })
    }
    const path = request.url.split('?')[0] ?? '/'
    const allowed = methodsServedAt(fastify, methods, path)
    if (allowed.length > 0) {
      const error = new MethodNotAllowedError(request.method, path)
      return reply.code(405).header('allow', allowed.join(', ')).send(errorBody(request, 405, error.code, error.message))
    }
    const error = new NotFoundError(`${request.method} ${path}`)
    return reply.code(404).send(errorBody(request, 404, error.code, error.message))
  }

  fastify.setErrorHandler((rawError: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const error = toServiceError(rawError)
    const statusCode = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500
    if (statusCode >= 500) {
      if (OUTAGE_CODES.has(rawError.code)) answeredDuringOutage(request)
      else request.log.error({ err: rawError }, 'request failed')
      const shown = isPublicError(error.code)
      return reply.code(statusCode).send(errorBody(request, statusCode, shown ? error.code : 'INTERNAL_ERROR', shown ? error.message : 'Internal Server Error'))
    }
    // A request no route takes is a 404, whatever Fastify found wrong with it on the way (a QUERY
    // without a content type is refused before the not-found handler runs).
    if (request.is404) return notFound(request, reply)
    return reply.code(statusCode).send(errorBody(request, statusCode, error.code ?? 'BAD_REQUEST', error.message))
  })

  fastify.setNotFoundHandler(notFound)
}

export default fp(errorHandler, { name: 'error-handler', fastify: '5.x', decorators: { fastify: ['config'] } })

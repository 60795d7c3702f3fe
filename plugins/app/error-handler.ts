import fp from 'fastify-plugin'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify'
import {
  DatabaseUnavailableError, MethodNotAllowedError, NotFoundError, isDatabaseUnavailable, isPublicError
} from '../../lib/errors.js'
import { EXPOSED_HEADERS, answeredDuringOutage } from '../../lib/request-log.js'
import { ErrorResponse, errorBody } from '../../schemas/error.js'

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
  return [...methods]
    .filter(
      (method) => method !== 'OPTIONS' && fastify.findRoute({ method: method as HTTPMethods, url: path }) !== null
    )
    .sort()
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
      return reply
        .code(405)
        .header('allow', allowed.join(', '))
        .send(errorBody(request, 405, error.code, error.message))
    }
    const error = new NotFoundError(`${request.method} ${path}`)
    return reply.code(404).send(errorBody(request, 404, error.code, error.message))
  }

  fastify.setErrorHandler((rawError: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const error = toServiceError(rawError)
    const statusCode =
      error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500
    if (statusCode >= 500) {
      if (OUTAGE_CODES.has(rawError.code)) answeredDuringOutage(request)
      else request.log.error({ err: rawError }, 'request failed')
      const shown = isPublicError(error.code)
      return reply
        .code(statusCode)
        .send(
          errorBody(
            request,
            statusCode,
            shown ? error.code : 'INTERNAL_ERROR',
            shown ? error.message : 'Internal Server Error'
          )
        )
    }
    // A request no route takes is a 404, whatever Fastify found wrong with it on the way (a QUERY
    // without a content type is refused before the not-found handler runs).
    if (request.is404) return notFound(request, reply)
    return reply.code(statusCode).send(errorBody(request, statusCode, error.code ?? 'BAD_REQUEST', error.message))
  })

  fastify.setNotFoundHandler(notFound)
}

export default fp(errorHandler, { name: 'error-handler', fastify: '5.x', decorators: { fastify: ['config'] } })

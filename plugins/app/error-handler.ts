import { STATUS_CODES } from 'node:http'
import fp from 'fastify-plugin'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { DatabaseUnavailableError, NotFoundError, isPublicError } from '../../lib/errors.js'
import { isDatabaseUnavailable } from '../../lib/database-errors.js'
import { ErrorResponse } from '../../schemas/error.js'

export function errorBody (request: FastifyRequest, statusCode: number, code: string, message: string): ErrorResponse {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, code, correlationId: request.id }
}

/**
 * A database that cannot be reached is `DATABASE_UNAVAILABLE`. An error that already carries a 4xx
 * is the client's (a body cut off by the client is an ECONNRESET with 400), whatever its code says.
 */
function toServiceError (error: FastifyError): FastifyError {
  const clientError = error.statusCode !== undefined && error.statusCode < 500
  return !clientError && isDatabaseUnavailable(error) ? new DatabaseUnavailableError({ cause: error }) : error
}

async function errorHandler (fastify: FastifyInstance) {
  fastify.addSchema(ErrorResponse)

  fastify.setErrorHandler((rawError: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const error = toServiceError(rawError)
    const statusCode = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500
    if (statusCode >= 500) {
      request.log.error({ err: rawError }, 'request failed')
      const shown = isPublicError(error.code)
      return reply.code(statusCode).send(errorBody(request, statusCode, shown ? error.code : 'INTERNAL_ERROR', shown ? error.message : 'Internal Server Error'))
    }
    return reply.code(statusCode).send(errorBody(request, statusCode, error.code ?? 'BAD_REQUEST', error.message))
  })

  fastify.setNotFoundHandler((request, reply) => {
    const error = new NotFoundError(`${request.method} ${request.url.split('?')[0]}`)
    return reply.code(404).send(errorBody(request, 404, error.code, error.message))
  })
}

export default fp(errorHandler, { name: 'error-handler', fastify: '5.x' })

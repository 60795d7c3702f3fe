import { randomUUID } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyBaseLogger } from 'fastify'
import { CORRELATION_HEADER } from '../../lib/request-log.js'
import type { ErrorResponse } from '../../schemas/error.js'

const CLIENT_ERRORS: Record<string, { statusCode: number, code: string, message: string }> = {
  ERR_HTTP_REQUEST_TIMEOUT: {
    statusCode: 408,
    code: 'REQUEST_TIMEOUT',
    message: 'The request did not arrive whole in time'
  },
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
  log.info(
    { correlationId, statusCode, code, parserError: error.code, remoteAddress: socket.remoteAddress },
    'request refused before routing'
  )
  const status = STATUS_CODES[statusCode] ?? 'Error'
  const body = JSON.stringify({ statusCode, error: status, message, code, correlationId } satisfies ErrorResponse)
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${statusCode} ${status}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n${CORRELATION_HEADER}: ${correlationId}\r\nConnection: close\r\n\r\n${body}`)
  }
  socket.destroy(error)
}

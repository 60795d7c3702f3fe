import { STATUS_CODES } from 'node:http'
import { Type, type Static } from '@sinclair/typebox'
import type { FastifyRequest } from 'fastify'

export const ErrorResponse = Type.Object({
  statusCode: Type.Integer({ minimum: 400, maximum: 599 }),
  error: Type.String({ description: 'HTTP reason phrase' }),
  message: Type.String(),
  code: Type.String({ description: 'stable machine-readable code' }),
  correlationId: Type.String({ description: 'the request\'s `x-correlation-id`, under which the service logged it' })
}, {
  $id: 'ErrorResponse',
  title: 'Error',
  additionalProperties: false,
  examples: [{
    statusCode: 401,
    error: 'Unauthorized',
    message: 'Missing, invalid or expired access token or session',
    code: 'UNAUTHORIZED',
    correlationId: '8330b7bb-bec4-46ab-9e06-40a07f9409c8'
  }]
})

export type ErrorResponse = Static<typeof ErrorResponse>

/** The error body of an answer to `request`: what the error handler sends, and a route that answers an error itself. */
export function errorBody (
  request: Pick<FastifyRequest, 'id'>,
  statusCode: number,
  code: string,
  message: string
): ErrorResponse {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, code, correlationId: request.id }
}

/** An error answer as the OpenAPI document shows it: the shared body, with what the status means on that route. */
export function errorResponse (description: string) {
  return Type.Ref('ErrorResponse', { description })
}

/** The answer of an operator endpoint without the operations token. */
export const opsUnauthorizedResponse = {
  401: errorResponse(
    'OPS_TOKEN is set and the request does not carry it as a Bearer token or HTTP Basic password (`OPS_UNAUTHORIZED`)'
  )
}

/** What any route may answer when a request fails for a reason no dependency explains: a defect. */
export const unexpectedErrorResponse = {
  500: errorResponse(
    'The request failed unexpectedly (`INTERNAL_ERROR`: the detail is logged under the correlation id, never answered)'
  )
}

/** The error answers every route outside the probes can give, besides its own. */
export const commonErrorResponses = {
  429: errorResponse(
    'Too many requests from this client or address (`RATE_LIMITED`); `retry-after` says when to try again'
  ),
  500: errorResponse(
    'The database is unavailable (`DATABASE_UNAVAILABLE`), or the request failed unexpectedly (`INTERNAL_ERROR`: the detail is logged under the correlation id, never answered)'
  )
}

/** The largest request body the service reads (Fastify's bodyLimit); a larger one is a 413. */
export const BODY_LIMIT_BYTES = 64 * 1024

/** A route that validates its input: its query string, path parameters, headers or body. */
export const invalidRequestResponse = {
  400: errorResponse(
    'The request does not match its schema (`FST_ERR_VALIDATION`), or its body is not valid JSON (`FST_ERR_CTP_…`); the message says what is wrong'
  )
}

/** A route that takes a JSON body, besides its validation. */
export const bodyErrorResponses = {
  ...invalidRequestResponse,
  413: errorResponse(`The body is larger than ${BODY_LIMIT_BYTES / 1024} KiB (\`FST_ERR_CTP_BODY_TOO_LARGE\`)`),
  415: errorResponse(
    'The body is in a media type the service does not read: send `application/json` (`FST_ERR_CTP_INVALID_MEDIA_TYPE`)'
  )
}

/** A route behind a Bearer access token or the session cookie, whose revocation is checked in Redis. */
export const authenticatedErrorResponses = {
  ...commonErrorResponses,
  401: errorResponse(
    'The access token is missing, malformed, expired or revoked, or the session cookie names no live session: signed out, idle past `SESSION_IDLE_TIMEOUT_S` or older than `SESSION_MAX_AGE_S` (`UNAUTHORIZED`; the answer clears the cookie)'
  )
}

/** A route that changes something, behind the session cookie too. */
export const unsafeAuthenticatedErrorResponses = {
  ...authenticatedErrorResponses,
  403: errorResponse(
    'Made with the session cookie, the request lacks the header `x-csrf: 1`, or comes from another site (`Sec-Fetch-Site: cross-site`, or an `Origin` that is none of this service\'s own, `PUBLIC_ORIGIN` and `CORS_ORIGIN`) (`CSRF_REJECTED`; its message names which of these rules refused it). Bearer-token requests are not checked'
  )
}

/** Why a route behind a token may answer 503, whatever else it calls. */
export const TOKEN_CHECK_UNAVAILABLE =
  'Redis cannot say whether the token is revoked and `AUTH_BLACKLIST_FAIL_CLOSED` is on, or holds the session cookie\'s session and cannot be reached (`AUTH_UNAVAILABLE`)'

/** Why a route that calls the billing system may answer 503. */
export const BILLING_UNAVAILABLE =
  'The billing system is unavailable, did not answer in time, or its request queue is full (`BILLING_UNAVAILABLE`)'

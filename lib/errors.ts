import createError, { type FastifyErrorConstructor } from '@fastify/error'

/*
 * The service's errors in one place: the public catalogue (each code and its message, safe to show
 * even on a 5xx, as Fastify's FST_ERR_* are), the classes every upstream or dependency failure is
 * sorted into, and what makes a database error "unreachable".
 */

const publicCodes = new Set<string>()

/**
 * Defines a service error whose message is safe to show, even on a 5xx: it is written here,
 * never taken from a driver or an upstream.
 */
function definePublicError (code: string, message: string, statusCode: number): FastifyErrorConstructor {
  publicCodes.add(code)
  return createError(code, message, statusCode)
}

export function isPublicError (code: unknown): boolean {
  return typeof code === 'string' && publicCodes.has(code)
}

export const DatabaseUnavailableError = definePublicError(
  'DATABASE_UNAVAILABLE',
  'Database is temporarily unavailable',
  500
)
export const NotFoundError = definePublicError('NOT_FOUND', 'Route %s not found', 404)
export const MethodNotAllowedError = definePublicError(
  'METHOD_NOT_ALLOWED',
  'Method %s is not served at %s: the Allow header lists those that are',
  405
)
export const UnauthorizedError = definePublicError(
  'UNAUTHORIZED',
  'Missing, invalid or expired access token or session',
  401
)
export const CsrfRejectedError = definePublicError(
  'CSRF_REJECTED',
  'Refused as a possible cross-site request forgery: %s',
  403
)
export const OpsUnauthorizedError = definePublicError(
  'OPS_UNAUTHORIZED',
  'This operator endpoint needs the operations token (OPS_TOKEN)',
  401
)
export const InvalidCredentialsError = definePublicError('INVALID_CREDENTIALS', 'Invalid email or password', 401)
export const TwoFactorRequiredError = definePublicError(
  'TWO_FACTOR_REQUIRED',
  'This account has two-factor authentication on, which portal sign-in cannot complete',
  403
)
export const NoClientAccountError = definePublicError(
  'NO_CLIENT_ACCOUNT',
  'No billing client account acts for this user',
  403
)
export const PasswordSignInOffError = definePublicError(
  'PASSWORD_SIGN_IN_OFF',
  'Browsers sign in through the identity provider here (GET /auth/oidc/login), not with a password',
  403
)
export const NoClientChoiceError = definePublicError(
  'NO_CLIENT_CHOICE',
  'No choice of billing client is under way for this browser: it was made, or it expired; sign in again (GET /auth/oidc/login)',
  401
)
export const OidcUnavailableError = definePublicError(
  'OIDC_UNAVAILABLE',
  'Sign-in through the identity provider is temporarily unavailable: the provider could not be reached',
  503
)
export const InvalidLogoutTokenError = definePublicError(
  'INVALID_LOGOUT_TOKEN',
  'The logout token is not one the identity provider signed for this service: %s',
  400
)
export const AuthUnavailableError = definePublicError(
  'AUTH_UNAVAILABLE',
  'Authentication is temporarily unavailable',
  503
)
export const BillingUnavailableError = definePublicError(
  'BILLING_UNAVAILABLE',
  'Billing service is temporarily unavailable',
  503
)
export const InvoiceNotFoundError = definePublicError('INVOICE_NOT_FOUND', 'Invoice not found', 404)
export const RateLimitedError = definePublicError('RATE_LIMITED', 'Too many requests: retry in %s', 429)
export const OrderRejectedError = definePublicError('ORDER_REJECTED', 'The billing system refused the order', 422)
export const CrmUnavailableError = definePublicError('CRM_UNAVAILABLE', 'CRM service is temporarily unavailable', 503)
export const OrderNotFoundError = definePublicError('ORDER_NOT_FOUND', 'Order not found', 404)
export const ParkedEventNotFoundError = definePublicError(
  'PARKED_EVENT_NOT_FOUND',
  'No platform event is parked under this id',
  404
)
export const ParkedEventRefusedError = definePublicError(
  'PARKED_EVENT_REFUSED',
  'The parked event was refused again (%s): it stays parked until the data is mended',
  409
)
export const ParkedEventRetryUnavailableError = definePublicError(
  'PARKED_EVENT_RETRY_UNAVAILABLE',
  'The parked event could not be retried now: the CRM, the database or Redis did not answer; it stays parked, retry shortly',
  503
)
export const OrderCancelledError = definePublicError(
  'ORDER_CANCELLED',
  'The CRM could not take the order: it was not placed, and its billing order and invoice are cancelled',
  503
)
export const OrderIncompleteError = definePublicError(
  'ORDER_INCOMPLETE',
  'The order could not be completed now: retry with the same Idempotency-Key to complete it; otherwise the service completes or cancels it within minutes',
  503
)
export const OrderPlacementCancelledError = definePublicError(
  'ORDER_PLACEMENT_CANCELLED',
  'The order of this Idempotency-Key was not completed and is cancelled, with its billing order and invoice: to order, send a new key',
  422
)
export const IdempotencyKeyInUseError = definePublicError(
  'IDEMPOTENCY_KEY_IN_USE',
  'A request with this Idempotency-Key is still being processed: retry shortly',
  409
)
export const IdempotencyKeyReusedError = definePublicError(
  'IDEMPOTENCY_KEY_REUSED',
  'This Idempotency-Key was used with a different request body',
  422
)
export const TooManyStreamsError = definePublicError(
  'TOO_MANY_STREAMS',
  'This account holds the most SSE streams it may (%s); close one first',
  429
)
export const StreamsUnavailableError = definePublicError(
  'STREAMS_UNAVAILABLE',
  'This instance holds the most SSE streams it may; retry shortly',
  503
)
export const TooManyFailedSignInsError = definePublicError(
  'TOO_MANY_FAILED_SIGN_INS',
  'Too many failed sign-ins: retry in %s',
  429
)

/**
 * A status change whose SSE frame breaks its schema (schemas/sse-events.ts): refused before Redis. Its code,
 * which operators read, keeps the word event.
 */
export const SseFrameRefusedError = createError(
  'SSE_EVENT_REFUSED',
  'The %s event breaks its schema and is not published: %s',
  500
)

/**
 * The classes every upstream or dependency failure is sorted into, once, where it happens.
 * Everything above the integration clients uses the class, never the raw error text.
 */
export const FAILURE_CLASSES = [
  'timeout',
  'connection_refused',
  'auth_failed',
  'http_5xx',
  'quota_exceeded',
  'upstream_error'
] as const
export type FailureClass = typeof FAILURE_CLASSES[number]

/**
 * Redis refused a command (a reply error: OOM past maxmemory, READONLY on a replica, MISCONF) or its
 * client could not send it (the connection closed, no offline queue, retries spent): the service's
 * own store failing, which a log line must not lay at an upstream's door.
 */
export const REDIS_FAILURE = 'redis_error'
/** Every class a failure is sorted into: an upstream's, or Redis's. */
export const FAILURE_KINDS = [...FAILURE_CLASSES, REDIS_FAILURE] as const
export type FailureKind = typeof FAILURE_KINDS[number]

export class UpstreamFailure extends Error {
  constructor (readonly failure: FailureClass, readonly upstream: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = 'UpstreamFailure'
  }
}

/**
 * The upstream answered and refused this request for a reason of the request's own (AddOrder of a
 * product that does not exist): an answer, not a failure of the upstream. It still rejects the
 * call, but neither the upstream's error rate nor its request queue counts it as failed.
 */
export class UpstreamRefusal extends UpstreamFailure {
  constructor (upstream: string, message: string) {
    super('upstream_error', upstream, message)
    this.name = 'UpstreamRefusal'
  }
}

const NETWORK_CODES: Record<string, FailureClass> = {
  ECONNREFUSED: 'connection_refused',
  ECONNRESET: 'connection_refused',
  EHOSTUNREACH: 'connection_refused',
  ENOTFOUND: 'connection_refused',
  EPIPE: 'connection_refused',
  ETIMEDOUT: 'timeout',
  UND_ERR_CONNECT_TIMEOUT: 'timeout',
  UND_ERR_HEADERS_TIMEOUT: 'timeout',
  UND_ERR_BODY_TIMEOUT: 'timeout',
  UND_ERR_SOCKET: 'connection_refused',
  ABORT_ERR: 'timeout'
}

function codeOf (error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined
  const { code, cause } = error as { code?: unknown, cause?: unknown }
  if (typeof code === 'string' && code in NETWORK_CODES) return code
  return codeOf(cause) ?? (typeof code === 'string' ? code : undefined)
}

// ioredis's error classes (from redis-errors) and the messages of its client-side refusals.
const REDIS_ERROR_NAMES = new Set(['ReplyError', 'ParserError', 'InterruptError', 'MaxRetriesPerRequestError'])
const REDIS_CLIENT_MESSAGES = /^(?:Connection is closed\.|Stream isn't writeable and enableOfflineQueue options is false)$/

function isRedisFailure (error: unknown): boolean {
  return error instanceof Error && (REDIS_ERROR_NAMES.has(error.name) || REDIS_CLIENT_MESSAGES.test(error.message))
}

/** Any failure's class, for logs and checks: Redis's own apart from the upstreams'. */
export function classifyFailure (error: unknown): FailureKind {
  return isRedisFailure(error) ? REDIS_FAILURE : classifyUpstreamFailure(error)
}

/** An upstream call's failure class (the integration clients call no Redis). */
export function classifyUpstreamFailure (error: unknown): FailureClass {
  if (error instanceof UpstreamFailure) return error.failure
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return 'timeout'
  if (error instanceof Error && /timeout|timed out/i.test(error.message)) return 'timeout'
  const code = codeOf(error)
  return (code !== undefined ? NETWORK_CODES[code] : undefined) ?? 'upstream_error'
}

// SQLSTATE classes and driver errors that mean "the database cannot be reached", as opposed
// to a query that is wrong: 08 connection exception, 53300 too_many_connections (the server
// refuses new connections), 57P01-57P03 shutdown or not yet accepting connections.
const UNAVAILABLE_SQLSTATE = /^(08...|53300|57P0[1-3])$/
const UNAVAILABLE_NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EPIPE'
])
const UNAVAILABLE_MESSAGES = /timeout exceeded when trying to connect|^timeout expired$|Connection terminated|Query read timeout|Client has encountered a connection error/

export function isDatabaseUnavailable (error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false
  const { code, message } = error as { code?: unknown, message?: unknown }
  if (typeof code === 'string' && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_NETWORK_CODES.has(code))) return true
  return typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message)
}

/**
 * An error's own words for an operator's message: its message, or its code when it has none (a connection
 * refused on every address of a name).
 */
export function describeCause (error: unknown): string | undefined {
  if (!(error instanceof Error)) return error === undefined ? undefined : String(error)
  if (error.message !== '') return error.message
  const inner = error instanceof AggregateError ? describeCause(error.errors[0]) : undefined
  return inner ?? codeOf(error) ?? error.name
}

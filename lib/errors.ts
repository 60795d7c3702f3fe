import createError, { type FastifyErrorConstructor } from '@fastify/error'

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

export const DatabaseUnavailableError = definePublicError('DATABASE_UNAVAILABLE', 'Database is temporarily unavailable', 500)
export const NotFoundError = definePublicError('NOT_FOUND', 'Route %s not found', 404)
export const UnauthorizedError = definePublicError('UNAUTHORIZED', 'Missing, invalid or expired access token', 401)
export const OpsUnauthorizedError = definePublicError('OPS_UNAUTHORIZED', 'This operator endpoint needs the operations token (OPS_TOKEN)', 401)
export const InvalidCredentialsError = definePublicError('INVALID_CREDENTIALS', 'Invalid email or password', 401)
export const TwoFactorRequiredError = definePublicError('TWO_FACTOR_REQUIRED', 'This account has two-factor authentication on, which portal sign-in cannot complete', 403)
export const NoClientAccountError = definePublicError('NO_CLIENT_ACCOUNT', 'No billing client account acts for this user', 403)
export const AuthUnavailableError = definePublicError('AUTH_UNAVAILABLE', 'Authentication is temporarily unavailable', 503)
export const BillingUnavailableError = definePublicError('BILLING_UNAVAILABLE', 'Billing service is temporarily unavailable', 503)
export const InvoiceNotFoundError = definePublicError('INVOICE_NOT_FOUND', 'Invoice not found', 404)
export const RateLimitedError = definePublicError('RATE_LIMITED', 'Too many requests: retry in %s', 429)
export const OrderRejectedError = definePublicError('ORDER_REJECTED', 'The billing system refused the order', 422)
export const CrmUnavailableError = definePublicError('CRM_UNAVAILABLE', 'CRM service is temporarily unavailable', 503)
export const OrderNotFoundError = definePublicError('ORDER_NOT_FOUND', 'Order not found', 404)
export const TooManyStreamsError = definePublicError('TOO_MANY_STREAMS', 'This account holds the most event streams it may (%s); close one first', 429)
export const StreamsUnavailableError = definePublicError('STREAMS_UNAVAILABLE', 'This instance holds the most event streams it may; retry shortly', 503)
export const TooManyFailedSignInsError = definePublicError('TOO_MANY_FAILED_SIGN_INS', 'Too many failed sign-ins: retry in %s', 429)

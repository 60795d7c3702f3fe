import { createHash, randomUUID } from 'node:crypto'
import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { BillingUnavailableError, InvalidCredentialsError, NoClientAccountError, TooManyFailedSignInsError, TwoFactorRequiredError, UpstreamFailure } from '../lib/errors.js'
import { FailureLimiter, type Limit } from '../lib/failure-limiter.js'
import { AccessToken, LoginRequest } from '../schemas/auth.js'
import { authenticatedErrorResponses, BILLING_UNAVAILABLE, bodyErrorResponses, commonErrorResponses, errorResponse } from '../schemas/error.js'

const authRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.addSchema(LoginRequest)
  fastify.addSchema(AccessToken)
  const { ACCESS_TOKEN_TTL_SECONDS, LOGIN_RATE_LIMIT_MAX, LOGIN_ACCOUNT_FAILURES_MAX, LOGIN_ACCOUNT_WINDOW_MS, REDIS_KEY_PREFIX } = fastify.config
  const accountFailures = new FailureLimiter(fastify.redis, { keyPrefix: `${REDIS_KEY_PREFIX}sign-in-failures:`, max: LOGIN_ACCOUNT_FAILURES_MAX, windowMs: LOGIN_ACCOUNT_WINDOW_MS })
  // The account's key: its email as billing compares it, hashed so that Redis holds no address.
  const accountOf = (email: string) => createHash('sha256').update(email.trim().toLowerCase()).digest('hex')
  // Redis away: sign-in goes on unlimited, as rate limiting does (the specification), and says so.
  const unlimited = (error: unknown): Limit => {
    fastify.log.warn({ err: error }, 'sign-in failures cannot be counted: Redis is unavailable')
    return { limited: false, retryAfterSeconds: 0 }
  }

  fastify.post('/auth/login', {
    onRequest: fastify.requireDatabase,
    config: { rateLimit: { max: LOGIN_RATE_LIMIT_MAX, timeWindow: 60_000, keyGenerator: (request) => `login:${request.ip}` } },
    schema: {
      operationId: 'signIn',
      tags: ['auth'],
      summary: 'Sign in with the billing account; returns a Bearer access token',
      security: [],
      body: Type.Ref(LoginRequest),
      response: {
        200: Type.Ref(AccessToken, { description: 'signed in' }),
        ...commonErrorResponses,
        ...bodyErrorResponses,
        401: errorResponse('The email and password do not match a billing account (`INVALID_CREDENTIALS`)'),
        403: errorResponse('The account has two-factor authentication on, which sign-in through the billing API cannot complete (`TWO_FACTOR_REQUIRED`), or no billing client account found acts for the user (`NO_CLIENT_ACCOUNT`)'),
        429: errorResponse('More than `LOGIN_RATE_LIMIT_MAX` sign-ins from this address in a minute (`RATE_LIMITED`), or `LOGIN_ACCOUNT_FAILURES_MAX` failed sign-ins of this email from any address within `LOGIN_ACCOUNT_WINDOW_MS` (`TOO_MANY_FAILED_SIGN_INS`, whether or not the account exists); `retry-after` says when to try again'),
        503: errorResponse(`${BILLING_UNAVAILABLE}; or Redis is unavailable and \`AUTH_BLACKLIST_FAIL_CLOSED\` is on, so no token could be checked (\`AUTH_UNAVAILABLE\`)`)
      }
    }
  }, async (request, reply) => {
    const { email, password } = request.body
    await fastify.tokenBlacklist.ensureCheckable()
    const account = accountOf(email)
    const limit = await accountFailures.check(account).catch(unlimited)
    if (limit.limited) {
      reply.header('retry-after', limit.retryAfterSeconds)
      throw new TooManyFailedSignInsError(`${limit.retryAfterSeconds} seconds`)
    }
    const signIn = await fastify.billingQueue.run((deadline) => fastify.billing.signIn(email, password, deadline)).catch((error: unknown) => {
      throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
    })
    // One answer whatever was wrong: an unknown email and a wrong password look alike, and count alike.
    if (signIn.outcome === 'invalid_credentials') {
      await accountFailures.fail(account).catch(unlimited)
      throw new InvalidCredentialsError()
    }
    // The billing API checks the password only: a token now would skip the account's second factor.
    if (signIn.outcome === 'two_factor_required') throw new TwoFactorRequiredError()
    if (signIn.outcome === 'no_client_account') throw new NoClientAccountError()
    await accountFailures.reset(account).catch(unlimited)
    const accessToken = await fastify.jwt.sign({ sub: String(signIn.clientId), jti: randomUUID() })
    return { accessToken, expiresIn: ACCESS_TOKEN_TTL_SECONDS, tokenType: 'Bearer' as const }
  })

  fastify.post('/auth/logout', {
    onRequest: [fastify.requireDatabase, fastify.authenticate],
    schema: {
      operationId: 'signOut',
      tags: ['auth'],
      summary: 'Revoke the access token until it expires',
      security: [{ bearerAuth: [] }],
      response: {
        204: Type.Null({ description: 'revoked' }),
        ...authenticatedErrorResponses,
        503: errorResponse('Redis is unavailable: the revocation cannot be stored, nor the token checked (`AUTH_UNAVAILABLE`)')
      }
    }
  }, async (request, reply) => {
    await fastify.tokenBlacklist.revoke(request.user.jti, request.user.exp)
    return reply.code(204).send(null)
  })
}

export default authRoutes

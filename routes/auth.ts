import { randomUUID } from 'node:crypto'
import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { BillingUnavailableError, InvalidCredentialsError, NoClientAccountError, TwoFactorRequiredError } from '../lib/errors.js'
import { UpstreamFailure } from '../lib/failure.js'
import { AccessToken, LoginRequest } from '../schemas/auth.js'
import { authenticatedErrorResponses, BILLING_UNAVAILABLE, bodyErrorResponses, commonErrorResponses, errorResponse } from '../schemas/error.js'

const authRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.addSchema(LoginRequest)
  fastify.addSchema(AccessToken)
  const { ACCESS_TOKEN_TTL_SECONDS, LOGIN_RATE_LIMIT_MAX } = fastify.config

  fastify.post('/auth/login', {
    onRequest: fastify.requireDatabase,
    config: { rateLimit: { max: LOGIN_RATE_LIMIT_MAX, timeWindow: 60_000, keyGenerator: (request) => `login:${request.ip}` } },
    schema: {
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
        429: errorResponse('More than `LOGIN_RATE_LIMIT_MAX` sign-ins from this address in a minute (`RATE_LIMITED`); `retry-after` says when to try again'),
        503: errorResponse(`${BILLING_UNAVAILABLE}; or Redis is unavailable and \`AUTH_BLACKLIST_FAIL_CLOSED\` is on, so no token could be checked (\`AUTH_UNAVAILABLE\`)`)
      }
    }
  }, async (request) => {
    const { email, password } = request.body
    await fastify.tokenBlacklist.ensureCheckable()
    const signIn = await fastify.billingQueue.run((deadline) => fastify.billing.signIn(email, password, deadline)).catch((error: unknown) => {
      throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
    })
    // One answer whatever was wrong: an unknown email and a wrong password look alike.
    if (signIn.outcome === 'invalid_credentials') throw new InvalidCredentialsError()
    // The billing API checks the password only: a token now would skip the account's second factor.
    if (signIn.outcome === 'two_factor_required') throw new TwoFactorRequiredError()
    if (signIn.outcome === 'no_client_account') throw new NoClientAccountError()
    const accessToken = await fastify.jwt.sign({ sub: String(signIn.clientId), jti: randomUUID() })
    return { accessToken, expiresIn: ACCESS_TOKEN_TTL_SECONDS, tokenType: 'Bearer' as const }
  })

  fastify.post('/auth/logout', {
    onRequest: [fastify.requireDatabase, fastify.authenticate],
    schema: {
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

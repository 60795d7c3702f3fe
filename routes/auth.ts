import { randomUUID } from 'node:crypto'
import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { BillingUnavailableError, InvalidCredentialsError, TwoFactorRequiredError } from '../lib/errors.js'
import { UpstreamFailure } from '../lib/failure.js'
import { AccessToken, LoginRequest } from '../schemas/auth.js'

const authRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.addSchema(LoginRequest)
  fastify.addSchema(AccessToken)
  const { ACCESS_TOKEN_TTL_SECONDS, LOGIN_RATE_LIMIT_MAX } = fastify.config

  fastify.post('/auth/login', {
    config: { rateLimit: { max: LOGIN_RATE_LIMIT_MAX, timeWindow: 60_000, keyGenerator: (request) => `login:${request.ip}` } },
    schema: {
      tags: ['auth'],
      summary: 'Sign in with the billing account; returns a Bearer access token',
      security: [],
      body: Type.Ref(LoginRequest),
      response: { 200: Type.Ref(AccessToken), 401: Type.Ref('ErrorResponse'), 403: Type.Ref('ErrorResponse'), 503: Type.Ref('ErrorResponse') }
    }
  }, async (request) => {
    const { email, password } = request.body
    const login = await fastify.billingQueue.run((signal) => fastify.billing.validateLogin(email, password, signal)).catch((error: unknown) => {
      throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
    })
    // One answer whatever was wrong: an unknown email and a wrong password look alike.
    if (login === null) throw new InvalidCredentialsError()
    // The billing API checks the password only: a token now would skip the account's second factor.
    if (login.twoFactorRequired) throw new TwoFactorRequiredError()
    const accessToken = await fastify.jwt.sign({ sub: String(login.clientId), jti: randomUUID() })
    return { accessToken, expiresIn: ACCESS_TOKEN_TTL_SECONDS, tokenType: 'Bearer' as const }
  })

  fastify.post('/auth/logout', {
    onRequest: fastify.authenticate,
    schema: {
      tags: ['auth'],
      summary: 'Revoke the access token until it expires',
      security: [{ bearerAuth: [] }],
      response: { 204: Type.Null({ description: 'revoked' }), 401: Type.Ref('ErrorResponse'), 503: Type.Ref('ErrorResponse') }
    }
  }, async (request, reply) => {
    await fastify.tokenBlacklist.revoke(request.user.jti, request.user.exp)
    return reply.code(204).send(null)
  })
}

export default authRoutes

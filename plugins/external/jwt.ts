import fp from 'fastify-plugin'
import fastifyJwt from '@fastify/jwt'
import type { FastifyInstance } from 'fastify'

export interface AccessTokenClaims {
  /** The billing client id. */
  sub: string
  jti: string
}

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: AccessTokenClaims
    user: AccessTokenClaims & { exp: number, iat: number }
  }
}

async function jwt (fastify: FastifyInstance) {
  const { JWT_SECRET, ACCESS_TOKEN_TTL_SECONDS } = fastify.config
  await fastify.register(fastifyJwt, {
    secret: JWT_SECRET,
    // HS256 only: a token naming another algorithm, `none` included, is refused.
    sign: { algorithm: 'HS256', expiresIn: ACCESS_TOKEN_TTL_SECONDS },
    verify: { algorithms: ['HS256'], requiredClaims: ['sub', 'jti', 'exp'] }
  })
}

export default fp(jwt, { name: 'jwt', fastify: '5.x', decorators: { fastify: ['config'] } })

import fp from 'fastify-plugin'
import fastifyJwt from '@fastify/jwt'
import type { FastifyInstance } from 'fastify'

export interface AccessTokenClaims {
  /** The billing client id, as a JWT's `sub` is: a string. */
  sub: string
  jti: string
}

/**
 * Who mints the portal's access tokens (`iss`), and what they are for (`aud`): fixed, so a token of another
 * issuer sharing the secret is refused.
 */
export const TOKEN_ISSUER = 'portal-bff'
export const TOKEN_AUDIENCE = 'portal-api'
/**
 * A billing client id as a token's `sub`: a positive integer in digits, without a leading zero, of at
 * most 15 digits, so that it is a safe integer. WHMCS takes a client id it cannot read as an integer
 * as no filter at all: `"abc"` or `"-1"` would read every client's invoices.
 */
export const CLIENT_ID_SUB = /^[1-9][0-9]{0,14}$/

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: AccessTokenClaims
    /**
     * The verified claims, with `sub` as the number it was checked to be: the access concern's
     * authentication sets it (it verifies with `fastify.jwt.verify`, not `request.jwtVerify`).
     */
    user: AccessTokenClaims & { exp: number, iat: number, clientId: number }
  }
}

async function jwt (fastify: FastifyInstance) {
  const { JWT_SECRET, ACCESS_TOKEN_TTL_SECONDS } = fastify.config
  await fastify.register(fastifyJwt, {
    secret: JWT_SECRET,
    // HS256 only: a token naming another algorithm, `none` included, is refused.
    sign: { algorithm: 'HS256', expiresIn: ACCESS_TOKEN_TTL_SECONDS, iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE },
    verify: {
      algorithms: ['HS256'],
      requiredClaims: ['sub', 'jti', 'exp', 'iss', 'aud'],
      allowedIss: TOKEN_ISSUER,
      allowedAud: TOKEN_AUDIENCE,
      allowedSub: CLIENT_ID_SUB,
      // A browser sends one token for its whole life: its signature is checked once, and the
      // verified claims kept until the token expires (fast-jwt's cache, keyed by the token's SHA-256).
      cache: true
    },
  })
}

export default fp(jwt, { name: 'jwt', fastify: '5.x', decorators: { fastify: ['config'] } })

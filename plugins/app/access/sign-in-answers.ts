import type { FastifyRequest } from 'fastify'
import type { Session } from './sessions.js'

// What the two ways of signing in, /auth (routes.ts) and /auth/oidc (oidc/routes.ts), answer and share.

/** What a session answers the page: never a token. */
export function sessionInfo ({ clientId, expiresAt, idleExpiresAt, identity: { name, email, signIn } }: Session) {
  return {
    clientId,
    name,
    email,
    signIn,
    expiresAt: new Date(expiresAt).toISOString(),
    idleExpiresAt: new Date(idleExpiresAt).toISOString()
  }
}

/** The origin the provider sends browsers back to: the first PUBLIC_ORIGIN, or the request's own. */
export function publicOriginOf (request: FastifyRequest, publicOrigins: readonly string[]): string {
  return publicOrigins[0] ?? `${request.protocol}://${request.host}`
}

/**
 * The sign-in limit per address, LOGIN_RATE_LIMIT_MAX a minute. Every way of signing in shares
 * one bucket: a second endpoint gives no second allowance.
 */
export function signInRateLimitOf (max: number) {
  return { rateLimit: { max, timeWindow: 60_000, groupId: 'sign-in', keyGenerator: (request: FastifyRequest) => `login:${request.ip}` } }
}

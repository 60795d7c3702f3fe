import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import blacklist from './blacklist.js'
import sessions from './sessions.js'
import authentication from './authentication.js'
import oidc from './oidc/index.js'

/** The routes of signing in, registered beside this plugin in the `api` scope (app.ts). */
export { default as authRoutes } from './routes.js'
export { oidcRoutes } from './oidc/index.js'

/**
 * Access: signing in and the sessions. The revoked-token blacklist, the sessions and their cookie,
 * the authentication hooks and the OpenID Connect sign-in, registered together in the browser-facing
 * API scope (app.ts), whose routes are their only readers: their decorators are that scope's, not
 * the root's (decision 0129).
 */
async function access (fastify: FastifyInstance) {
  await fastify.register(blacklist)
  await fastify.register(sessions)
  await fastify.register(authentication)
  await fastify.register(oidc)
}

export default fp(access, { name: 'access', fastify: '5.x' })

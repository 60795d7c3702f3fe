import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { UnauthorizedError } from '../../lib/errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** onRequest hook of the portal routes: a valid, unrevoked Bearer access token. */
    authenticate (request: FastifyRequest, reply: FastifyReply): Promise<void>
  }
}

async function authentication (fastify: FastifyInstance) {
  fastify.decorate('authenticate', async (request: FastifyRequest) => {
    try {
      await request.jwtVerify()
    } catch {
      // One answer whatever was wrong with the token: expired, forged, malformed or missing.
      throw new UnauthorizedError()
    }
    if (await fastify.tokenBlacklist.isRevoked(request.user.jti)) throw new UnauthorizedError()
  })
}

export default fp(authentication, { name: 'authentication', fastify: '5.x', dependencies: ['jwt', 'blacklist'] })

import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { RateLimitedError, UnauthorizedError } from '../../lib/errors.js'
import { FailureLimiter } from '../../lib/failure-limiter.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** onRequest hook of the portal routes: a valid, unrevoked Bearer access token. */
    authenticate (request: FastifyRequest, reply: FastifyReply): Promise<void>
  }
}

/** Failed token checks are counted per client address over a minute. */
const TOKEN_FAILURE_WINDOW_MS = 60_000

async function authentication (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, TOKEN_FAILURES_MAX } = fastify.config
  const failures = new FailureLimiter(fastify.redis, { keyPrefix: `${REDIS_KEY_PREFIX}token-failures:`, max: TOKEN_FAILURES_MAX, windowMs: TOKEN_FAILURE_WINDOW_MS })

  /**
   * A failed check counts against the client's address; past TOKEN_FAILURES_MAX a minute the answer
   * is 429, so a flood of made-up tokens costs one Redis command each. A valid token costs nothing more.
   */
  async function refuse (request: FastifyRequest, reply: FastifyReply): Promise<never> {
    const limit = await failures.fail(request.ip).catch(() => undefined)
    if (limit?.limited === true) {
      reply.header('retry-after', limit.retryAfterSeconds)
      throw new RateLimitedError(`${limit.retryAfterSeconds} seconds`)
    }
    // One answer whatever was wrong with the token: expired, forged, malformed, missing or revoked.
    throw new UnauthorizedError()
  }

  fastify.decorate('authenticate', async (request: FastifyRequest, reply: FastifyReply) => {
    try {
      await request.jwtVerify()
    } catch {
      return await refuse(request, reply)
    }
    if (await fastify.tokenBlacklist.isRevoked(request.user.jti)) await refuse(request, reply)
  })
}

export default fp(authentication, { name: 'authentication', fastify: '5.x', dependencies: ['jwt', 'blacklist', 'redis'], decorators: { fastify: ['config'] } })

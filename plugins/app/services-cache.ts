import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { ServicesCache } from '../../lib/services-cache.js'

declare module 'fastify' {
  interface FastifyInstance {
    servicesCache: ServicesCache
  }
}

async function servicesCache (fastify: FastifyInstance) {
  const onCommand = (durationMs: number) => fastify.metrics.observeCacheCommand(durationMs)
  fastify.decorate('servicesCache', new ServicesCache(fastify.redis, `${fastify.config.REDIS_KEY_PREFIX}services-cache:`, fastify.log, { onCommand }))
}

export default fp(servicesCache, { name: 'services-cache', fastify: '5.x', dependencies: ['redis', 'metrics'], decorators: { fastify: ['config'] } })

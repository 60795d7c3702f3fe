import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { ServicesCache } from '../../lib/services-cache.js'

declare module 'fastify' {
  interface FastifyInstance {
    servicesCache: ServicesCache
  }
}

async function servicesCache (fastify: FastifyInstance) {
  fastify.decorate('servicesCache', new ServicesCache(fastify.redis, `${fastify.config.REDIS_KEY_PREFIX}services-cache:`, fastify.log))
}

export default fp(servicesCache, { name: 'services-cache', fastify: '5.x', dependencies: ['redis'], decorators: { fastify: ['config'] } })

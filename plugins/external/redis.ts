import fp from 'fastify-plugin'
import fastifyRedis from '@fastify/redis'
import type { FastifyInstance } from 'fastify'

const MAX_RECONNECT_DELAY_MS = 2000

async function redis (fastify: FastifyInstance) {
  const { config } = fastify
  await fastify.register(fastifyRedis, {
    url: config.REDIS_URL,
    connectionName: config.SERVICE_NAME,
    // Commands fail at once while Redis is away instead of queueing, and a hung server
    // cannot hold a command longer than the command timeout.
    enableOfflineQueue: false,
    commandTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
    connectTimeout: config.REDIS_COMMAND_TIMEOUT_MS * 2,
    maxRetriesPerRequest: 1,
    retryStrategy: (attempt: number) => Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS)
  })
}

export default fp(redis, { name: 'redis', fastify: '5.x', decorators: { fastify: ['config'] } })

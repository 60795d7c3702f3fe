import fp from 'fastify-plugin'
import fastifyRedis from '@fastify/redis'
import { Redis } from 'ioredis'
import type { FastifyInstance } from 'fastify'
import { abortable } from '../../lib/abortable.js'

const MAX_RECONNECT_DELAY_MS = 2000

// How long a goodbye to Redis may take before the connection is simply dropped.
const QUIT_TIMEOUT_MS = 1000

/** QUIT when Redis answers in time; otherwise drop the connection and stop reconnecting. */
export async function closeRedis (client: Redis): Promise<void> {
  if (client.status === 'ready') {
    try {
      await abortable(client.quit(), AbortSignal.timeout(QUIT_TIMEOUT_MS))
      return
    } catch {
      // Redis hung or went away while we said goodbye.
    }
  }
  client.disconnect()
}

async function redis (fastify: FastifyInstance) {
  const { config } = fastify
  const client = new Redis(config.REDIS_URL, {
    connectionName: config.SERVICE_NAME,
    // No CLIENT SETINFO on connect: when Redis goes away mid-handshake its rejection escapes ioredis.
    disableClientInfo: true,
    // Commands fail at once while Redis is away instead of queueing, and a hung server
    // cannot hold a command longer than the command timeout.
    enableOfflineQueue: false,
    commandTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
    connectTimeout: config.REDIS_COMMAND_TIMEOUT_MS * 2,
    maxRetriesPerRequest: 1,
    retryStrategy: (attempt: number) => Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS)
  })
  // @fastify/redis closes its client with QUIT alone, which rejects while Redis is down and
  // leaves the reconnect timer running; this plugin closes the client itself.
  await fastify.register(fastifyRedis, { client, closeClient: false })
  fastify.addHook('onClose', () => closeRedis(client))
}

export default fp(redis, { name: 'redis', fastify: '5.x', decorators: { fastify: ['config'] } })

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'

async function cache (fastify: FastifyInstance) {
  const { redis } = fastify
  fastify.coreHealth.register('cache', async () => { await redis.ping() })

  // One line per change of connection state, not one per failed reconnect attempt.
  let connected = redis.status === 'ready'
  redis.on('error', (error: Error) => {
    if (!connected) return
    connected = false
    fastify.log.error({ err: error }, 'cache connection lost; reconnecting')
  })
  redis.on('ready', () => {
    if (connected) return
    connected = true
    fastify.log.info('cache connection restored')
  })
}

export default fp(cache, { name: 'cache', fastify: '5.x', dependencies: ['redis', 'health'] })

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OutageLog } from '../../lib/outage-log.js'

/** The `cache` check of GET /health (its name is the operators'): Redis answers PING. */
async function redisCheck (fastify: FastifyInstance) {
  const { redis } = fastify
  fastify.health.core.register('cache', async () => { await redis.ping() })

  // One line when the connection is lost and one when it is back, with the failed reconnection
  // attempts between: the one error line of a Redis outage, whatever the traffic meanwhile.
  const outage = new OutageLog(fastify.log, 'cache connection to Redis', {
    level: 'error',
    consequence: 'reconnecting'
  })
  redis.on('error', (error: Error) => outage.error(error))
  redis.on('ready', () => outage.recovered())
}

export default fp(redisCheck, { name: 'redis-check', fastify: '5.x', dependencies: ['redis', 'health'] })

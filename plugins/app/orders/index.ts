import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OrderEvents } from './status-events.js'
import { OrderStore } from './store.js'
import { closeRedis } from '../../external/redis.js'

declare module 'fastify' {
  interface FastifyInstance {
    orders: OrderStore
    orderEvents: OrderEvents
  }
}

// Enough for a client that reconnects after a short outage to miss nothing.
const BACKLOG_LENGTH = 100
// A backlog only serves such a reconnection: a client with no change for a day has its key removed.
const BACKLOG_RETENTION_SECONDS = 86_400

async function orders (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, REDIS_COMMAND_TIMEOUT_MS } = fastify.config
  const subscriber = fastify.redis.duplicate({ enableOfflineQueue: true, autoResubscribe: false })
  subscriber.on('error', () => {})
  const orderEvents = new OrderEvents({
    redis: fastify.redis,
    subscriber,
    keyPrefix: REDIS_KEY_PREFIX,
    backlogLength: BACKLOG_LENGTH,
    backlogRetentionSeconds: BACKLOG_RETENTION_SECONDS,
    commandTimeoutMs: REDIS_COMMAND_TIMEOUT_MS,
    log: fastify.log
  })
  await orderEvents.start()
  fastify.decorate('orders', new OrderStore(fastify.pg.pool))
  fastify.decorate('orderEvents', orderEvents)
  fastify.addHook('onClose', async () => {
    orderEvents.stop()
    await closeRedis(subscriber)
  })
}

export default fp(orders, { name: 'orders', fastify: '5.x', dependencies: ['db', 'redis'], decorators: { fastify: ['config'] } })

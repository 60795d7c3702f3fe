import fp from 'fastify-plugin'
import fastifyPostgres from '@fastify/postgres'
import type { FastifyInstance } from 'fastify'

/**
 * Two pools: `pg` for business traffic, and `pg.probe`, one connection kept for health checks
 * so a probe never queues behind exhausted business traffic.
 */
async function postgres (fastify: FastifyInstance) {
  const { config } = fastify
  await fastify.register(fastifyPostgres, {
    connectionString: config.DATABASE_URL,
    application_name: config.SERVICE_NAME,
    max: config.DATABASE_POOL_MAX,
    connectionTimeoutMillis: config.DATABASE_CONNECT_TIMEOUT_MS,
    query_timeout: config.DATABASE_QUERY_TIMEOUT_MS
  })
  await fastify.register(fastifyPostgres, {
    name: 'probe',
    connectionString: config.DATABASE_URL,
    application_name: `${config.SERVICE_NAME}-probe`,
    max: 1,
    connectionTimeoutMillis: config.HEALTH_CHECK_TIMEOUT_MS,
    query_timeout: config.HEALTH_CHECK_TIMEOUT_MS
  })
  // An idle client whose server goes away emits 'error' on its pool; unhandled, it would
  // crash the process. The pool drops the client and the next query connects again.
  for (const pool of [fastify.pg.pool, fastify.pg.probe?.pool]) {
    pool?.on('error', (error) => fastify.log.warn({ err: error }, 'idle database connection lost'))
  }
}

export default fp(postgres, { name: 'postgres', fastify: '5.x', decorators: { fastify: ['config'] } })

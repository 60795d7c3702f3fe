import fp from 'fastify-plugin'
import fastifyPostgres from '@fastify/postgres'
import type { FastifyInstance } from 'fastify'
import type pg from 'pg'
import { describeCause } from '../../lib/errors.js'

/**
 * Hears every connection the pool makes for its whole life. pg-pool listens to a connection only
 * while it is idle: one lent out (a transaction's) whose socket closes emits an 'error' nobody hears,
 * which ends the process. Its query in flight fails on its own, and the pool drops it when it comes
 * back; `onLost` is told once a connection, however many errors it emits.
 */
function reportLostConnections (pool: pg.Pool, onLost: (error: Error) => void): void {
  pool.on('connect', (client) => {
    let reported = false
    client.on('error', (error) => {
      if (reported) return
      reported = true
      onLost(error)
    })
  })
}

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
  for (const [name, pool] of [['business', fastify.pg.pool], ['probe', fastify.pg.probe?.pool]] as const) {
    if (pool === undefined) continue
    // The error's message and code only: pg-pool hangs the whole client on it, settings included.
    reportLostConnections(pool, (error) => fastify.log.warn(
      { pool: name, cause: describeCause(error), code: (error as { code?: unknown }).code },
      'database connection lost: its query in flight fails, and the pool opens a new one when asked'
    ))
    // pg-pool re-emits an idle connection's error on the pool, already reported by the connection's own listener.
    pool.on('error', () => {})
  }
}

export default fp(postgres, { name: 'postgres', fastify: '5.x', decorators: { fastify: ['config'] } })

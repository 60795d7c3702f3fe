import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { describeCause, isDatabaseUnavailable } from '../../../lib/errors.js'
import { SlidingWindow } from '../../../lib/sliding-window.js'
import { databaseCheck } from './check.js'
import { databaseGate } from './gate.js'
import { databasePart } from './measures.js'
import { migrate } from './migrations.js'
import { instrumentPool } from './pool.js'

export { migrationBoundMs } from './migrations.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** An onRequest hook: 500 `DATABASE_UNAVAILABLE` while the last database check failed. */
    requireDatabase: () => Promise<void>
  }
}

/** The database: its migrations at start, its `database` check, its measures and the gate of the API. */
async function database (fastify: FastifyInstance) {
  const { DATABASE_URL, DATABASE_CONNECT_TIMEOUT_MS, DATABASE_MIGRATION_TIMEOUT_MS } = fastify.config
  const bounds = { connectTimeoutMs: DATABASE_CONNECT_TIMEOUT_MS, migrationTimeoutMs: DATABASE_MIGRATION_TIMEOUT_MS }
  const version = await migrate(DATABASE_URL, bounds).catch((error: unknown) => {
    const url = new URL(DATABASE_URL)
    const where = `PostgreSQL at ${url.hostname}:${url.port || 5432}${url.pathname} (DATABASE_URL)`
    const what = isDatabaseUnavailable(error) ? 'cannot be reached' : 'could not be migrated'
    throw new Error(`${where} ${what}: ${describeCause(error) ?? 'no answer'}`, { cause: error })
  })
  fastify.log.info({ schemaVersion: version }, 'database migrations applied')

  const probe = fastify.pg.probe
  if (probe === undefined) throw new Error('The database plugin needs the postgres plugin\'s probe pool')
  const pool = fastify.pg.pool
  const check = databaseCheck({ probe, pool, log: fastify.log })
  fastify.health.core.register('database', check)
  fastify.health.integrations.register('database', check)

  // Business queries only: the probe's are the health check's own.
  const queries = new SlidingWindow()
  instrumentPool(pool, (durationMs, failed) => {
    queries.record(durationMs, failed)
    fastify.metrics.observeQuery(durationMs, failed)
  })
  fastify.monitoring.register('database', databasePart(pool, queries))

  fastify.decorate('requireDatabase', databaseGate(fastify.health.core))
}

export default fp(database, { name: 'database', fastify: '5.x', dependencies: ['postgres', 'health', 'monitoring'] })

import { join } from 'node:path'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import pg from 'pg'
import Postgrator from 'postgrator'
import { DatabaseUnavailableError, describeCause, isDatabaseUnavailable } from '../../lib/errors.js'
import { instrumentPool, poolUsage, type PoolUsage } from '../../lib/pg-pool.js'
import { percentOf } from '../../lib/numbers.js'
import { SlidingWindow, type WindowSummary } from '../../lib/sliding-window.js'
import { windowed } from './monitoring/alerts.js'
import type { MonitoringSource } from './monitoring/index.js'
import { projectRoot } from '../../lib/project-root.js'
import { databaseCheck } from './database-check.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** An onRequest hook: 500 `DATABASE_UNAVAILABLE` while the last database check failed. */
    requireDatabase: () => Promise<void>
  }
}

declare module './monitoring/index.js' {
  interface MonitoringParts {
    /** The business pool, and its queries over the recent window. */
    database: PoolUsage & { queries: WindowSummary }
  }
}

// Any constant works; it only has to be the same for every instance of the service.
const MIGRATION_LOCK_ID = 4_242_001

/**
 * Applies pending migrations, one instance at a time when several start together. All of it is one
 * transaction under a transaction-scoped lock: behind a pooler in transaction mode the server
 * connection outlives this client, so only COMMIT or ROLLBACK may free the lock, and the session is
 * left as it was found. A failed migration rolls back with the versions recorded before it.
 */
export async function migrate (connectionString: string, connectTimeoutMs: number): Promise<string> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: connectTimeoutMs })
  // A lost connection fails the query in flight too, which reports it; unheard, the event would end the process.
  client.on('error', () => {})
  await client.connect()
  try {
    await client.query('BEGIN')
    try {
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_ID])
      // The connection's search_path decides where the tables live; postgrator would assume public.
      const { rows } = await client.query<{ schema: string | null, searchPath: string }>(
        'SELECT current_schema() AS schema, current_setting(\'search_path\') AS "searchPath"'
      )
      const session = rows[0]!
      const postgrator = new Postgrator({
        currentSchema: session.schema ?? 'public',
        migrationPattern: join(projectRoot, 'migrations', '*.sql'),
        driver: 'pg',
        schemaTable: 'schema_version',
        execQuery: (query) => client.query(query)
      })
      await postgrator.migrate()
      const version = await postgrator.getDatabaseVersion()
      // postgrator SETs search_path before each query; committed, that would stay on a pooled server connection.
      await client.query('SELECT set_config(\'search_path\', $1, false)', [session.searchPath])
      await client.query('COMMIT')
      return String(version)
    } catch (error) {
      // A connection too broken to roll back ends the transaction as it closes.
      await client.query('ROLLBACK').catch(() => {})
      throw error
    }
  } finally {
    await client.end()
  }
}

const poolMetric = (name: string, help: string, value: (usage: PoolUsage) => number) =>
  ({ name, help, type: 'gauge' as const, samples: (usage: PoolUsage) => [{ value: value(usage) }] })

/** The business pool's usage and its queries over the recent window. */
function databasePart (pool: pg.Pool, queries: SlidingWindow): MonitoringSource<PoolUsage & { queries: WindowSummary }> {
  return {
    description: 'the database pool',
    read: () => ({ ...poolUsage(pool), queries: queries.summary() }),
    measures: {
      database_pool_usage: (database) => ({ value: percentOf(database.inUse, database.max) }),
      query_duration: ({ queries }) => windowed(queries.p95, queries.count, 'queries')
    },
    metrics: [
      poolMetric('portal_bff_db_pool_connections_in_use', 'Connections of the business pool lent out', (usage) => usage.inUse),
      poolMetric('portal_bff_db_pool_connections_idle', 'Idle connections of the business pool', (usage) => usage.idle),
      poolMetric('portal_bff_db_pool_connections_max', 'Size of the business pool (DATABASE_POOL_MAX)', (usage) => usage.max),
      poolMetric('portal_bff_db_pool_waiting_requests', 'Callers waiting for a connection of the business pool', (usage) => usage.waiting)
    ]
  }
}

async function db (fastify: FastifyInstance) {
  const { DATABASE_URL, DATABASE_CONNECT_TIMEOUT_MS } = fastify.config
  const version = await migrate(DATABASE_URL, DATABASE_CONNECT_TIMEOUT_MS).catch((error: unknown) => {
    const url = new URL(DATABASE_URL)
    const where = `PostgreSQL at ${url.hostname}:${url.port || 5432}${url.pathname} (DATABASE_URL)`
    const what = isDatabaseUnavailable(error) ? 'cannot be reached' : 'refused the migrations'
    throw new Error(`${where} ${what}: ${describeCause(error) ?? 'no answer'}`, { cause: error })
  })
  fastify.log.info({ schemaVersion: version }, 'database migrations applied')

  const probe = fastify.pg.probe
  if (probe === undefined) throw new Error('The db plugin needs the postgres plugin\'s probe pool')
  const pool = fastify.pg.pool
  const check = databaseCheck({ probe, pool, log: fastify.log })
  fastify.coreHealth.register('database', check)
  fastify.integrationHealth.register('database', check)

  // Business queries only: the probe's are the health check's own.
  const queries = new SlidingWindow()
  instrumentPool(pool, (durationMs, failed) => {
    queries.record(durationMs, failed)
    fastify.metrics.observeQuery(durationMs, failed)
  })
  fastify.monitoring.register('database', databasePart(pool, queries))

  // Specification §7: while the database is unreachable, every API request fails with HTTP 500, the routes
  // that need no query included. The gate judges by the last finished run of the checks GET /health
  // shares, and refreshes a stale one behind the request: it adds no query of its own and no wait
  // (a run waits for the cache check too, which a hung Redis would hold for the health timeout).
  const { coreHealth } = fastify
  fastify.decorate('requireDatabase', async function requireDatabase () {
    if (coreHealth.reusable === undefined) coreHealth.run().catch(() => {})
    if (coreHealth.latest?.database?.status === 'fail') throw new DatabaseUnavailableError()
  })
}

export default fp(db, { name: 'db', fastify: '5.x', dependencies: ['postgres', 'health', 'monitoring'] })

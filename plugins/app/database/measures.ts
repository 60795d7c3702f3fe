import type pg from 'pg'
import { percentOf } from '../../../lib/numbers.js'
import type { SlidingWindow, WindowSummary } from '../../../lib/sliding-window.js'
import { windowed } from '../monitoring/alerts.js'
import type { MonitoringSource } from '../monitoring/index.js'
import { poolUsage, type PoolUsage } from './pool.js'

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** The business pool, and its queries over the recent window. */
    database: PoolUsage & { queries: WindowSummary }
  }
}

const poolMetric = (name: string, help: string, value: (usage: PoolUsage) => number) =>
  ({ name, help, type: 'gauge' as const, samples: (usage: PoolUsage) => [{ value: value(usage) }] })

/** The business pool's usage and its queries over the recent window. */
export function databasePart (
  pool: pg.Pool,
  queries: SlidingWindow
): MonitoringSource<PoolUsage & { queries: WindowSummary }> {
  return {
    description: 'the database pool',
    read: () => ({ ...poolUsage(pool), queries: queries.summary() }),
    measures: {
      database_pool_usage: (database) => ({ value: percentOf(database.inUse, database.max) }),
      query_duration: ({ queries }) => windowed(queries.p95, queries.count, 'queries')
    },
    metrics: [
      poolMetric(
        'portal_bff_db_pool_connections_in_use',
        'Connections of the business pool lent out',
        (usage) => usage.inUse
      ),
      poolMetric('portal_bff_db_pool_connections_idle', 'Idle connections of the business pool', (usage) => usage.idle),
      poolMetric(
        'portal_bff_db_pool_connections_max',
        'Size of the business pool (DATABASE_POOL_MAX)',
        (usage) => usage.max
      ),
      poolMetric(
        'portal_bff_db_pool_waiting_requests',
        'Callers waiting for a connection of the business pool',
        (usage) => usage.waiting
      )
    ]
  }
}

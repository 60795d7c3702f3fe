import type { FastifyBaseLogger } from 'fastify'
import type pg from 'pg'
import type { HealthCheck } from '../../lib/health-checks.js'
import { LentConnections } from '../../lib/pg-pool.js'
import { OutageLog } from '../../lib/outage-log.js'

export interface DatabaseCheckOptions {
  /** The probe pool: one connection, the check's own. */
  probe: Pick<pg.Pool, 'connect'>
  /** The business pool, whose connections in flight a hung server fails at once. */
  pool: pg.Pool
  log: FastifyBaseLogger
}

/** The `database` check: SELECT 1 on the probe pool, bounded by the check's signal. */
export function databaseCheck ({ probe, pool, log }: DatabaseCheckOptions): HealthCheck {
  // The one error line of a database outage: the API's refusals meanwhile are not logged each.
  const outage = new OutageLog(log, 'database: PostgreSQL', { level: 'error', consequence: 'the API answers 500 DATABASE_UNAVAILABLE' })
  const lent = new LentConnections(pool)
  const selectOne = async (signal: AbortSignal) => {
    const client = await probe.connect()
    let released = false
    const release = (error?: Error) => {
      if (released) return
      released = true
      signal.removeEventListener('abort', onAbort)
      client.release(error)
    }
    // A server that does not answer SELECT 1 within the check's bound answers no query: drop the
    // probe's connection rather than leave it in the pool, and fail the business queries waiting on
    // the same server now rather than at their query timeout (the gate refuses new ones from now on).
    const onAbort = () => {
      release(new Error('health check abandoned'))
      const dropped = lent.drop()
      if (dropped > 0) log.warn({ connections: dropped }, 'database not answering: queries in flight failed at once instead of at DATABASE_QUERY_TIMEOUT_MS')
    }
    signal.addEventListener('abort', onAbort, { once: true })
    try {
      await client.query('SELECT 1')
      release()
    } catch (error) {
      release(error as Error)
      throw error
    }
  }
  return async (signal: AbortSignal) => {
    try {
      await selectOne(signal)
    } catch (error) {
      outage.error(error)
      throw error
    }
    outage.recovered()
  }
}

import type { FastifyBaseLogger } from 'fastify'
import type pg from 'pg'
import type { HealthCheck } from '../../../lib/health-checks.js'
import { LentConnections } from './pool.js'
import { OutageLog } from '../../../lib/outage-log.js'

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
  const outage = new OutageLog(log, 'database: PostgreSQL', {
    level: 'error',
    consequence: 'the API answers 500 DATABASE_UNAVAILABLE'
  })
  const lent = new LentConnections(pool)
  // A server that does not answer the probe within the check's bound, in its connect or its SELECT 1,
  // answers no query: fail the business queries waiting on the same server now rather than at their
  // query timeout (the gate refuses new ones from now on).
  const dropLent = () => {
    const dropped = lent.drop()
    if (dropped > 0) {
      log.warn(
        { connections: dropped },
        'database not answering: queries in flight failed at once instead of at DATABASE_QUERY_TIMEOUT_MS'
      )
    }
  }
  const selectOne = async (signal: AbortSignal) => {
    const client = await probe.connect()
    let released = false
    const release = (error?: Error) => {
      if (released) return
      released = true
      signal.removeEventListener('abort', onAbort)
      client.release(error)
    }
    // The probe's connection is dropped rather than left in the pool.
    const onAbort = () => release(new Error('health check abandoned'))
    if (signal.aborted) {
      onAbort()
      throw new Error('health check abandoned while connecting')
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
    signal.addEventListener('abort', dropLent, { once: true })
    try {
      await selectOne(signal)
    } catch (error) {
      outage.error(error)
      throw error
    } finally {
      signal.removeEventListener('abort', dropLent)
    }
    outage.recovered()
  }
}

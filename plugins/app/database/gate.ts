import { DatabaseUnavailableError } from '../../../lib/errors.js'
import type { HealthCheckRegistry } from '../../../lib/health-checks.js'

/**
 * The gate: an onRequest hook that answers 500 `DATABASE_UNAVAILABLE` while the last `database`
 * check failed. Specification §7: while the database is unreachable, every API request fails with
 * HTTP 500, the routes that need no query included. It judges by the last finished run of the
 * checks GET /health shares, and refreshes a stale one behind the request: it adds no query of its
 * own and no wait (a run waits for Redis's check too, which a hung Redis would hold for the health
 * timeout).
 */
export function databaseGate (core: HealthCheckRegistry): () => Promise<void> {
  return async function requireDatabase () {
    if (core.reusable === undefined) core.run().catch(() => {})
    if (core.latest?.database?.status === 'fail') throw new DatabaseUnavailableError()
  }
}

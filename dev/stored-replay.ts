import pg from 'pg'
import { ORDER_PROVISION_CHANNEL } from '../plugins/app/platform-events/subscription.js'
import { ReplayPositions } from '../plugins/app/platform-events/replay-positions.js'

/**
 * The replayId the development entry's new sandbox CRM numbers its first event with: the one after
 * the position the service stored for its channel in an earlier run (its PostgreSQL mirror), so
 * that position is still valid and a restart logs no lost replay position. 1 when none is stored,
 * or the database cannot say (the service's own start reports that).
 */
export async function firstReplayIdAfterStored (databaseUrl: string): Promise<number> {
  // Bounded both ways: a PostgreSQL that does not answer (a PAUSEd PgBouncer accepts the connect) is the service's start to report.
  const client = new pg.Pool({ connectionString: databaseUrl, max: 1, connectionTimeoutMillis: 2000, query_timeout: 2000 })
  client.on('error', () => {})
  try {
    return (await new ReplayPositions(client).read(ORDER_PROVISION_CHANNEL) ?? 0) + 1
  } catch {
    return 1
  } finally {
    await client.end()
  }
}

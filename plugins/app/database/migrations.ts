import { join } from 'node:path'
import pg from 'pg'
import Postgrator from 'postgrator'
import { isDatabaseUnavailable } from '../../../lib/errors.js'
import { projectRoot } from '../../../lib/project-root.js'

// Any constant works; it only has to be the same for every instance of the service.
const MIGRATION_LOCK_ID = 4_242_001

export interface MigrationBounds {
  /**
   * DATABASE_CONNECT_TIMEOUT_MS: the connect, and the first answer (behind PgBouncer the connect alone proves nothing).
   */
  connectTimeoutMs: number
  /** DATABASE_MIGRATION_TIMEOUT_MS: the wait for another instance's migration, then this one's own, each. */
  migrationTimeoutMs: number
}

/** The longest a migration step takes before it fails: what Fastify's plugin timeout must leave it. */
export function migrationBoundMs ({ connectTimeoutMs, migrationTimeoutMs }: MigrationBounds): number {
  // connect, BEGIN, the lock and the migration each with the connect bound for their answer, ROLLBACK
  return 5 * connectTimeoutMs + 2 * migrationTimeoutMs
}

/** The wait for another instance's migration ran out (lock_timeout), or this one's own did (statement_timeout). */
function migrationTimedOut (error: unknown, step: 'lock' | 'migration'): unknown {
  const { code } = error as { code?: unknown }
  if (code !== '55P03' && code !== '57014') return error
  const what = step === 'lock' ? 'another instance\'s migration held the migration lock' : 'the migrations ran'
  return new Error(`${what} longer than DATABASE_MIGRATION_TIMEOUT_MS`, { cause: error })
}

/**
 * Applies pending migrations, one instance at a time when several start together. All of it is one
 * transaction under a transaction-scoped lock: behind a pooler in transaction mode the server
 * connection outlives this client, so only COMMIT or ROLLBACK may free the lock, and the session is
 * left as it was found. A failed migration rolls back with the versions recorded before it.
 * Every query is bounded (docs/decisions/0080): a stalled server fails the start within the connect
 * bound, a slow migration of another instance is waited for, within the migration bound.
 */
export async function migrate (
  connectionString: string,
  { connectTimeoutMs, migrationTimeoutMs }: MigrationBounds
): Promise<string> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: connectTimeoutMs })
  // A lost connection fails the query in flight too, which reports it; unheard, the event would end the process.
  client.on('error', () => {})
  const query = (text: string, values: unknown[] | undefined, timeoutMs: number): Promise<pg.QueryResult> => {
    // pg bounds one query by its own query_timeout, which its types do not list.
    const config: pg.QueryConfig & { query_timeout: number } = { text, values, query_timeout: timeoutMs }
    return client.query(config)
  }
  // The server gives up first (statement_timeout, lock_timeout); the connect bound more without its answer is
  // a stalled server.
  const serverBoundMs = migrationTimeoutMs + connectTimeoutMs
  await client.connect()
  try {
    // The first answer: a PgBouncer that is PAUSEd, or whose server is stalled, accepts the connect and holds
    // the query.
    await query(`BEGIN; SET LOCAL statement_timeout = ${migrationTimeoutMs}; SET LOCAL lock_timeout = ${migrationTimeoutMs}`, undefined, connectTimeoutMs)
    try {
      await query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_ID], serverBoundMs).catch((error: unknown) => {
        throw migrationTimedOut(error, 'lock')
      })
      const deadline = performance.now() + migrationTimeoutMs
      const left = () => Math.max(1, deadline - performance.now()) + connectTimeoutMs
      // The connection's search_path decides where the tables live; postgrator would assume public.
      const { rows } = await query(
        'SELECT current_schema() AS schema, current_setting(\'search_path\') AS "searchPath"',
        undefined,
        left()
      )
      const session = rows[0] as { schema: string | null, searchPath: string }
      const postgrator = new Postgrator({
        currentSchema: session.schema ?? 'public',
        migrationPattern: join(projectRoot, 'migrations', '*.sql'),
        driver: 'pg',
        schemaTable: 'schema_version',
        execQuery: (text) => query(text, undefined, left())
      })
      await postgrator.migrate().catch((error: unknown) => { throw migrationTimedOut(error, 'migration') })
      const version = await postgrator.getDatabaseVersion()
      // postgrator SETs search_path before each query; committed, that would stay on a pooled server connection.
      await query('SELECT set_config(\'search_path\', $1, false)', [session.searchPath], left())
      await query('COMMIT', undefined, left())
      return String(version)
    } catch (error) {
      // A server that did not answer cannot roll back either: closing the connection ends the transaction.
      if (!isDatabaseUnavailable(error)) await query('ROLLBACK', undefined, connectTimeoutMs).catch(() => {})
      throw error
    }
  } finally {
    // With a query still unanswered, pg closes the socket rather than wait for the server.
    await client.end()
  }
}

import { randomUUID } from 'node:crypto'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import pg from 'pg'
import type { FastifyInstance } from 'fastify'
import { projectRoot } from '../../../../lib/project-root.js'
import { buildTestApp, SHARED_POSTGRES, startTestSandbox } from '../../../helpers/app.js'
import { PrivatePgBouncer } from '../../../helpers/private-pgbouncer.js'
import { skipWithout } from '../../../helpers/packages.js'
import { bearer, login } from '../../../helpers/tokens.js'

const skip = skipWithout(['pgbouncer'])

async function withClient<T> (connectionString: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString })
  await client.connect()
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

/** A database of the test's own: through PgBouncer a schema cannot be chosen by search_path. */
async function ownDatabase (t: Test): Promise<string> {
  const database = `portal_bff_pgbouncer_${randomUUID().replaceAll('-', '')}`
  await withClient(`${SHARED_POSTGRES}/postgres`, (client) => client.query(`CREATE DATABASE ${database}`))
  t.teardown(() => withClient(`${SHARED_POSTGRES}/postgres`, (client) => client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)))
  return database
}

async function advisoryLocks (database: string): Promise<number> {
  const { rows } = await withClient(`${SHARED_POSTGRES}/${database}`, (client) => client.query<{ count: number }>(
    "SELECT count(*)::int AS count FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
  ))
  return rows[0]?.count ?? -1
}

async function placeOrder (app: FastifyInstance): Promise<{ id: string }> {
  const response = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(await login(app)), payload: { productId: 1, billingCycle: 'monthly' } })
  if (response.statusCode !== 201) throw new Error(`order failed: ${response.statusCode} ${response.body}`)
  return response.json()
}

async function readOrders (t: Test, app: FastifyInstance, placed: Array<{ id: string }>, which: string): Promise<void> {
  const token = await login(app)
  const list = (await app.inject({ url: '/api/orders', headers: bearer(token) })).json()
  t.same(list.orders.map((order: { id: string }) => order.id).sort(), placed.map((order) => order.id).sort(), `${which} lists both orders`)
  for (const order of placed) {
    t.same((await app.inject({ url: `/api/orders/${order.id}`, headers: bearer(token) })).json(), order, `${which} reads order ${order.id}`)
  }
}

t.test('migrations through PgBouncer in transaction pooling leave no lock and no session setting behind', { skip }, async (t) => {
  const database = await ownDatabase(t)
  // Two server connections: one instance's migration holds the lock on one while the other's waits on the other.
  const bouncer = await PrivatePgBouncer.start({ database, poolSize: 2 })
  t.teardown(() => bouncer.stop())
  const sandbox = await startTestSandbox(t)

  const [first, second] = await Promise.all([
    buildTestApp(t, { DATABASE_URL: bouncer.url }, sandbox),
    buildTestApp(t, { DATABASE_URL: bouncer.url }, sandbox)
  ])
  const migrations = readdirSync(join(projectRoot, 'migrations')).filter((name) => name.includes('.do.')).map((name) => Number(name.split('.')[0]))
  const { rows: versions } = await withClient(bouncer.url, (client) => client.query<{ version: string }>('SELECT version FROM schema_version ORDER BY version'))
  t.same(versions.map((row) => Number(row.version)), [0, ...migrations.sort((a, b) => a - b)], 'every migration applied, once')

  const placed = [await placeOrder(first), await placeOrder(second)]
  await readOrders(t, first, placed, 'the first instance')
  await readOrders(t, second, placed, 'the second instance')

  t.equal(await advisoryLocks(database), 0, 'no advisory lock held once the instances have started')

  // PgBouncer still holds its server connections: a session lock left on one would hold this
  // start until the plugin timeout ("Plugin did not start in time: 'database'").
  const started = performance.now()
  const direct = await buildTestApp(t, { DATABASE_URL: `${SHARED_POSTGRES}/${database}` }, sandbox)
  const startMs = performance.now() - started
  t.ok(startMs < 5000, `an instance straight on PostgreSQL starts at once (${Math.round(startMs)} ms)`)
  await readOrders(t, direct, placed, 'the direct instance')
  t.equal(await advisoryLocks(database), 0, 'no advisory lock held after its start either')

  // Both server connections at once, each pinned by its transaction: what a session setting
  // left behind would show on, for whichever client PgBouncer hands it to next.
  const { rows: [fresh] } = await withClient(`${SHARED_POSTGRES}/${database}`, (client) => client.query<{ search_path: string }>('SHOW search_path'))
  const pinned = [new pg.Client({ connectionString: bouncer.url }), new pg.Client({ connectionString: bouncer.url })]
  for (const client of pinned) {
    await client.connect()
    t.teardown(() => client.end())
    await client.query('BEGIN')
  }
  const servers = await Promise.all(pinned.map(async (client) => {
    const { rows: [server] } = await client.query<{ pid: number, searchPath: string }>('SELECT pg_backend_pid() AS pid, current_setting(\'search_path\') AS "searchPath"')
    return server
  }))
  t.equal(new Set(servers.map((server) => server?.pid)).size, 2, 'both server connections seen')
  t.same(servers.map((server) => server?.searchPath), [fresh?.search_path, fresh?.search_path], 'search_path as a new connection has it')
  // Ended in a transaction, a client would make PgBouncer close its server connection.
  for (const client of pinned) await client.query('ROLLBACK')
})

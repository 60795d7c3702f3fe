import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { placeOrder } from '../helpers/provisioning.js'
import pg from 'pg'
import { buildTestApp, startTestSandbox, tempDir } from '../helpers/app.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { before } from '../helpers/before.js'
import { waitFor } from '../helpers/processes.js'
import { bearer, login } from '../helpers/tokens.js'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'

const DATABASE_UNAVAILABLE = { statusCode: 500, error: 'Internal Server Error', message: 'Database is temporarily unavailable', code: 'DATABASE_UNAVAILABLE' }
// The timeouts a request must not wait out, set far above what it is meant to wait (the health
// check's 500 ms): an answer before them did not wait on the database.
const WAITED_MS = 30_000

/** The request's answer, which must come before WAITED_MS. */
async function answered (app: FastifyInstance, request: InjectOptions): Promise<LightMyRequestResponse> {
  const response = await before(WAITED_MS, app.inject(request))
  if (response === undefined) throw new Error(`${request.method ?? 'GET'} ${String(request.url)}: no answer within ${WAITED_MS} ms, it waited on the database`)
  return response
}

/**
 * A PostgreSQL of the test's own, which it may hang, and an app on it, Jane signed in: its queries
 * wait ten minutes for an answer, so within the test only the health check (500 ms, run by every
 * request) can end them.
 */
async function hangableApp (t: Test, overrides: Record<string, string> = {}) {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const app = await buildTestApp(t, { DATABASE_URL: cluster.url, DATABASE_QUERY_TIMEOUT_MS: '600000', HEALTH_CHECK_TIMEOUT_MS: '500', HEALTH_CHECK_CACHE_MS: '0', ...overrides })
  return { cluster, app, token: await login(app) }
}

t.test('PostgreSQL hung or stopped: every API request answers 500 DATABASE_UNAVAILABLE in bounded time, then is served again', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {
    DATABASE_URL: cluster.url,
    DATABASE_CONNECT_TIMEOUT_MS: String(WAITED_MS),
    DATABASE_QUERY_TIMEOUT_MS: String(WAITED_MS),
    HEALTH_CHECK_TIMEOUT_MS: '500'
  }, sandbox)
  const token = await login(app)
  const order = await placeOrder(app, token)
  const unavailable = (what: string, response: LightMyRequestResponse) => {
    t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, `${what}: 500 DATABASE_UNAVAILABLE, before any database timeout`)
    t.notMatch(response.body, /ECONN|timeout|terminated|127\.0\.0\.1|postgres/i, `${what}: no driver text`)
  }
  const databaseFails = async () => (await app.inject('/health')).json().checks.database === 'fail'
  const served = async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200 &&
    (await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode === 200
  /** Once the health check has seen the database away, every API request, with a query or without. */
  const everyApiRequest = async (how: string) => {
    const billingOrders = sandbox.billing.orders.length
    unavailable(`${how}, GET /api/orders`, await answered(app, { url: '/api/orders', headers: bearer(token) }))
    unavailable(`${how}, GET /api/orders/:id`, await answered(app, { url: `/api/orders/${order.id}`, headers: bearer(token) }))
    unavailable(`${how}, GET /api/invoices`, await answered(app, { url: '/api/invoices', headers: bearer(token) }))
    unavailable(`${how}, GET /api/invoices/:id`, await answered(app, { url: '/api/invoices/1001', headers: bearer(token) }))
    unavailable(`${how}, GET /api/events`, await answered(app, { url: '/api/events', headers: bearer(token) }))
    unavailable(`${how}, POST /api/orders`, await answered(app, { method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } }))
    unavailable(`${how}, POST /auth/login`, await answered(app, { method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'correct-horse' } }))
    unavailable(`${how}, POST /auth/logout`, await answered(app, { method: 'POST', url: '/auth/logout', headers: bearer(token) }))
    t.equal(sandbox.billing.orders.length, billingOrders, `${how}: nothing placed in billing`)
  }
  // The list's two queries leave two open connections in the pool.
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode, 200)

  // Past the reuse time of the last check run, so the next request finds none to reuse.
  await new Promise((resolve) => setTimeout(resolve, 1100))
  cluster.hang()
  // The gate judges by the last finished check and never waits for one: a route without a query
  // answers at once until a check has seen the hang.
  // A probe starts a run of the checks, which waits out the hung database; the route answers before it ends.
  const run = app.inject('/health').then(() => 'the run of the checks' as const)
  const early = await Promise.race([app.inject({ url: '/api/invoices', headers: bearer(token) }), run])
  await run
  if (early === 'the run of the checks') throw new Error('GET /api/invoices answered only after the run of the checks it must not wait for')
  t.equal(early.statusCode, 200, 'hung, before the health check knows: invoices still served, without waiting for a check')
  // Until a health check sees it, a route's own query hangs with the server: the check's timeout drops it.
  unavailable('hung, before the health check knows', await answered(app, { url: '/api/orders', headers: bearer(token) }))
  await waitFor('the hang in /health', databaseFails)
  await everyApiRequest('hung')

  cluster.resume()
  await waitFor('the API to be served again', served)
  await cluster.stop()
  await waitFor('the stop in /health', databaseFails)
  await everyApiRequest('stopped')

  await cluster.start()
  await waitFor('the API to be served again', served)
  t.pass('recovers without restarting the service')
})

t.test('PostgreSQL hung under requests already admitted: once the database check times out, their queries fail at once with 500 DATABASE_UNAVAILABLE, not at DATABASE_QUERY_TIMEOUT_MS', async (t) => {
  const { cluster, app, token } = await hangableApp(t)
  t.equal((await app.inject('/health')).json().checks.database, 'ok')
  cluster.hang()
  t.teardown(() => cluster.resume())
  // Admitted: the last check found the database ok. Their queries hang with the server.
  const admitted = [
    app.inject({ url: '/api/orders', headers: bearer(token) }),
    app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })
  ]
  await waitFor('the hang in /health', async () => (await app.inject('/health')).json().checks.database === 'fail')
  const answers = await Promise.race([Promise.all(admitted), new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 5000))])
  t.ok(answers !== undefined, 'the admitted requests are answered once the check has seen the hang')
  for (const response of answers ?? []) {
    t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, `${response.raw.req.method} /api/orders: 500 DATABASE_UNAVAILABLE`)
  }
  cluster.resume()
  await waitFor('the API to be served again', async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200)
})

t.test('PostgreSQL hung while the check\'s probe has no connection open: the check times out in its connect, and the queries in flight still fail at once', async (t) => {
  const { cluster, app, token } = await hangableApp(t)
  t.equal((await app.inject('/health')).json().checks.database, 'ok')
  // The probe's connection ended, as an idle one is after its idle timeout: the next check connects anew.
  const admin = new pg.Client({ connectionString: cluster.url })
  await admin.connect()
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [`${app.config.SERVICE_NAME}-probe`])
  await admin.end()
  await waitFor('the probe pool empty', async () => app.pg.probe!.pool.totalCount === 0)
  cluster.hang()
  t.teardown(() => cluster.resume())
  const admitted = app.inject({ url: '/api/orders', headers: bearer(token) })
  await waitFor('the check to fail in its connect', async () => (await app.inject('/health')).json().checks.database === 'fail')
  const answer = await Promise.race([admitted, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 5000))])
  t.ok(answer !== undefined, 'the admitted request is answered once the check has seen the hang')
  if (answer !== undefined) t.same(answer.json(), { ...DATABASE_UNAVAILABLE, correlationId: answer.headers['x-correlation-id'] }, 'GET /api/orders: 500 DATABASE_UNAVAILABLE')
  cluster.resume()
  await waitFor('the API to be served again', async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200)
})

t.test('the business pool exhausted: callers wait DATABASE_CONNECT_TIMEOUT_MS, then 500 DATABASE_UNAVAILABLE; /health is unaffected', async (t) => {
  const app = await buildTestApp(t, { DATABASE_POOL_MAX: '1', DATABASE_CONNECT_TIMEOUT_MS: '400' })
  const token = await login(app)
  const lent = await app.pg.connect()
  let returned = false
  const giveBack = () => {
    if (!returned) lent.release()
    returned = true
  }
  t.teardown(giveBack)
  const response = await answered(app, { url: '/api/orders', headers: bearer(token) })
  t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, '500 DATABASE_UNAVAILABLE')
  t.notOk(returned, 'answered while the only connection was still lent: the connect timeout ended the wait')
  const health = await app.inject('/health')
  t.equal(health.statusCode, 200, '/health answers ok: its probe has a connection of its own')
  t.same(health.json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } })
  giveBack()
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode, 200, 'served again once the connection is back')
})

t.test('PostgreSQL at max_connections: 500 DATABASE_UNAVAILABLE at once, served again once connections free', async (t) => {
  const cluster = await PrivatePostgres.start({ maxConnections: 5 })
  t.teardown(() => cluster.destroy())
  const app = await buildTestApp(t, { DATABASE_URL: cluster.url, DATABASE_CONNECT_TIMEOUT_MS: String(WAITED_MS) })
  const token = await login(app)
  // The connections its start-up work left idle in the service's pool are ended: it has to open new ones.
  const admin = new pg.Client({ connectionString: cluster.url })
  await admin.connect()
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [app.config.SERVICE_NAME])
  await admin.end()
  await waitFor('the service\'s pool empty', async () => app.pg.pool.totalCount === 0)
  // The test takes every connection the server has left, so the service's pool can open none.
  const held: pg.Client[] = []
  t.teardown(() => Promise.all(held.map((client) => client.end())))
  for (;;) {
    const client = new pg.Client({ connectionString: cluster.url })
    const refusal = await client.connect().then(() => undefined, (error: unknown) => error)
    if (refusal !== undefined) {
      t.match(refusal, { code: '53300' }, 'the server refuses more connections: too_many_connections')
      break
    }
    held.push(client)
    if (held.length > 5) throw new Error('max_connections was not reached')
  }

  const response = await answered(app, { url: '/api/orders', headers: bearer(token) })
  t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, '500 DATABASE_UNAVAILABLE, not INTERNAL_ERROR, before DATABASE_CONNECT_TIMEOUT_MS')
  t.notMatch(response.body, /too many|clients|53300/i, 'no driver text')

  await Promise.all(held.splice(0).map((client) => client.end()))
  await waitFor('the orders to be served again', async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200)
  t.pass('served again without restarting the service')
})

t.test('the health check drops the connection a placement holds inside its transaction: the process lives on and the request answers 500 DATABASE_UNAVAILABLE', async (t) => {
  const logDir = tempDir('logs')
  const { cluster, app, token } = await hangableApp(t, { LOG_DIR: logDir })
  const placement = { method: 'POST' as const, url: '/api/orders', headers: { ...bearer(token), 'idempotency-key': 'dropped-in-transaction' }, payload: { productId: 1, billingCycle: 'monthly' } }
  // A transaction of the test's own holds the keys' table: the placement's first statement after
  // BEGIN waits for it, its connection lent out and inside a transaction.
  const holder = new pg.Client({ connectionString: cluster.url })
  holder.on('error', () => {})
  await holder.connect()
  t.teardown(() => holder.end())
  await holder.query('BEGIN')
  await holder.query('LOCK TABLE order_idempotency_keys IN SHARE MODE')
  const placing = app.inject(placement)
  await waitFor('the placement waiting inside its transaction', async () => {
    const client = new pg.Client({ connectionString: cluster.url })
    await client.connect()
    try {
      const { rows } = await client.query<{ waiting: number }>(
        'SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = \'Lock\' AND xact_start IS NOT NULL',
        [app.config.SERVICE_NAME])
      return rows[0]!.waiting === 1
    } finally {
      await client.end()
    }
  })
  // Just now answered, so the check's probe has its connection open and its SELECT 1 is what hangs.
  t.equal((await app.inject('/health')).json().checks.database, 'ok')
  cluster.hang()
  t.teardown(() => cluster.resume())
  t.equal((await app.inject('/health')).json().checks.database, 'fail', 'the check times out, and drops the connections lent out')
  // Without an 'error' listener on the lent connection, its closing ended this process here.
  const response = await placing
  t.same(response.json(), { ...DATABASE_UNAVAILABLE, correlationId: response.headers['x-correlation-id'] }, 'the placement: 500 DATABASE_UNAVAILABLE')
  // The log file is written asynchronously.
  const lost = () => readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter((line) => line.includes('database connection lost'))
  await waitFor('the lost connection in the log', async () => lost().length > 0)
  t.equal(lost().length, 1, 'one line for the one connection lost')
  t.match(JSON.parse(lost()[0]!), { level: 40, pool: 'business', cause: 'Connection terminated unexpectedly' }, 'a warning, with the pool and the cause')
  t.notMatch(lost()[0], /client|connectionString|postgres:\/\//, 'no connection settings')

  cluster.resume()
  await holder.query('ROLLBACK')
  await waitFor('the same Idempotency-Key to place the order', async () => (await app.inject(placement)).statusCode === 201)
  t.pass('the process served on, and placed the order once PostgreSQL answered')
})

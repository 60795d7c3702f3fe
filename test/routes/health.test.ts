import t, { type Test } from 'tap'
import { createServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildTestApp, TEST_DATABASE, ensureTestDatabase } from '../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { PgCountingProxy } from '../../dev/tools/pg-counting-proxy.js'
import { before } from '../helpers/before.js'
import { waitFor } from '../helpers/processes.js'
import type { FastifyInstance } from 'fastify'

const TIMEOUT_MS = 500
// Far above the check's timeout: a probe that answers before it did not wait on the hung command
// or query, whose own timeouts are set to it (a loaded machine answers well within it).
const WAITED_MS = 10_000
// A finished run is reused for up to 1 s; wait that out before judging a new state.
const REUSE_MS = 1000

async function health (app: FastifyInstance) {
  const response = await app.inject({ method: 'GET', url: '/health' })
  return { statusCode: response.statusCode, body: response.json() }
}

/** /health, which must answer before WAITED_MS: bounded by the check's own timeout, not the dependency's. */
async function boundedHealth (t: Test, app: FastifyInstance) {
  const answer = await before(WAITED_MS, health(app))
  if (answer === undefined) throw new Error(`/health did not answer within ${WAITED_MS} ms: it waited on the dependency`)
  t.pass('answered without waiting on the dependency')
  return answer
}

async function eventually (app: FastifyInstance, expected: { database: string, cache: string }) {
  await waitFor(`checks ${JSON.stringify(expected)}`, async () => {
    const { body } = await health(app)
    return body.checks.database === expected.database && body.checks.cache === expected.cache
  }, 20_000)
}

t.test('GET /health is ok when PostgreSQL and Redis are up', async (t) => {
  const app = await buildTestApp(t)
  const { statusCode, body } = await health(app)
  t.equal(statusCode, 200)
  t.same(body, { status: 'ok', checks: { database: 'ok', cache: 'ok' } })
  const live = await app.inject('/health/live')
  t.same(live.json(), { status: 'ok' })
  const ready = await app.inject('/health/ready')
  t.equal(ready.statusCode, 200)
  t.same(ready.json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } })
})

t.test('a private Redis hung, resumed, killed and restarted', async (t) => {
  // A command timeout well above the check's, so that a command failing at once is told apart.
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), REDIS_COMMAND_TIMEOUT_MS: String(WAITED_MS) })
  t.equal((await health(app)).statusCode, 200)

  redis.hang()
  await sleep(REUSE_MS)
  const hung = await boundedHealth(t, app)
  t.equal(hung.statusCode, 503, 'SIGSTOP turns /health degraded')
  t.same(hung.body, { status: 'degraded', checks: { database: 'ok', cache: 'fail' } })
  // Readiness does not follow a failing shared dependency. Why: docs/decisions/0041-readiness-and-shared-dependencies.md
  await sleep(REUSE_MS)
  // A probe starts a new run of the checks, which waits out the hung cache check; readiness answers before it.
  const run = app.inject('/health').then(() => 'the run of the checks' as const)
  const first = await Promise.race([app.inject('/health/ready'), run])
  await run
  if (first === 'the run of the checks') throw new Error('/health/ready answered only after the run of the checks it must not wait for')
  t.equal(first.statusCode, 200, 'readiness does not follow')
  t.same(first.json(), { status: 'degraded', checks: { database: 'ok', cache: 'fail' } }, 'its body says the cache fails, answered before the run under way ended')
  t.equal((await app.inject('/health/live')).statusCode, 200, 'liveness does not')

  redis.resume()
  await eventually(app, { database: 'ok', cache: 'ok' })
  t.pass('SIGCONT brings it back')

  await redis.kill()
  await sleep(REUSE_MS)
  const killed = await boundedHealth(t, app)
  t.equal(killed.body.checks.cache, 'fail', 'SIGKILL fails the check')

  // Something on Redis's port that accepts and never answers: the client connects and stays
  // short of ready. A command then fails at once instead of waiting in a queue for Redis.
  const silentSockets = new Set<Socket>()
  const silent = createServer((socket) => silentSockets.add(socket))
  const closeSilent = async (): Promise<void> => {
    for (const socket of silentSockets) socket.destroy()
    if (silent.listening) await new Promise((resolve) => silent.close(resolve))
  }
  t.teardown(closeSilent)
  await new Promise<void>((resolve) => silent.listen(redis.port, '127.0.0.1', resolve))
  await waitFor('the client to reach the silent port', async () => silentSockets.size > 0, 5000)
  const command = app.redis.get('any-key').then(() => 'answered', (error: unknown) => error)
  t.type(await before(WAITED_MS, command), Error, 'a command while Redis does not answer fails before the command timeout: not queued until it')
  await closeSilent()

  await redis.start()
  await eventually(app, { database: 'ok', cache: 'ok' })
  t.pass('a restart on the same port is picked up without restarting the service')
})

t.test('a private PostgreSQL cluster hung, resumed, stopped and started', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const app = await buildTestApp(t, { DATABASE_URL: cluster.url, HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), DATABASE_QUERY_TIMEOUT_MS: String(WAITED_MS), DATABASE_CONNECT_TIMEOUT_MS: String(WAITED_MS) })
  t.equal((await health(app)).statusCode, 200)

  cluster.hang()
  await sleep(REUSE_MS)
  for (const attempt of ['first', 'second']) {
    const hung = await boundedHealth(t, app)
    t.same(hung.body, { status: 'degraded', checks: { database: 'fail', cache: 'ok' } }, `SIGSTOP fails the check (${attempt} probe)`)
    await sleep(REUSE_MS)
  }

  cluster.resume()
  await eventually(app, { database: 'ok', cache: 'ok' })
  t.pass('SIGCONT brings it back')

  await cluster.stop()
  await sleep(REUSE_MS)
  const stopped = await boundedHealth(t, app)
  t.same(stopped.body.checks, { database: 'fail', cache: 'ok' }, 'a stopped server fails the check')

  await cluster.start()
  await eventually(app, { database: 'ok', cache: 'ok' })
  t.pass('recovers without restarting the service')
})

t.test('200 concurrent probes make at most 2 database round trips', async (t) => {
  await ensureTestDatabase()
  const proxy = await PgCountingProxy.start(5432)
  t.teardown(() => proxy.close())
  const app = await buildTestApp(t, { DATABASE_URL: proxy.url(TEST_DATABASE) })
  await sleep(REUSE_MS)
  proxy.queries = 0
  const responses = await Promise.all(Array.from({ length: 200 }, () => app.inject('/health')))
  t.ok(responses.every((response) => response.statusCode === 200), 'all 200')
  t.ok(proxy.queries >= 1, 'the probe did reach the database')
  t.ok(proxy.queries <= 2, `${proxy.queries} database round trips`)
})

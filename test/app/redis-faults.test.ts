import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { tempDir } from '../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { before } from '../helpers/before.js'
import { waitFor } from '../helpers/processes.js'
import { bearer, login } from '../helpers/tokens.js'

// Rows of the README's fault matrix for Redis that the other tests do not reach: a hung Redis
// under the portal routes and the reports, and a Redis at maxmemory refusing writes.

const COMMAND_TIMEOUT_MS = 500

function privateRedisApp (t: Test, overrides: Record<string, string> = {}) {
  return buildTestAppOnPrivateRedis(t, { REDIS_COMMAND_TIMEOUT_MS: String(COMMAND_TIMEOUT_MS), ...overrides })
}

const cacheReport = async (app: FastifyInstance) => (await app.inject('/api/health/services/cache')).json()

t.test('Redis hung: /health/queues answers within one command timeout with jobs null; fail-open token checks serve invoices from billing', async (t) => {
  // Five command timeouts (what a report that asked its five counts one after the other would wait)
  // are far more than one: an answer before them asked at once.
  const commandTimeoutMs = 2000
  const { redis, app } = await privateRedisApp(t, { AUTH_BLACKLIST_FAIL_CLOSED: 'false', REDIS_COMMAND_TIMEOUT_MS: String(commandTimeoutMs) })
  const token = await login(app)
  t.type((await app.inject('/health/queues')).json().jobs, 'object', 'job counts while Redis answers')
  const errorsBefore = (await cacheReport(app)).errors
  redis.hang()

  const queues = await before(5 * commandTimeoutMs, app.inject('/health/queues'))
  if (queues === undefined) throw new Error('/health/queues did not answer before five command timeouts: it asked Redis one count after the other')
  t.equal(queues.statusCode, 200, 'the report still answers, within one command timeout, not five')
  t.equal(queues.json().jobs, null, 'jobs: null, Redis did not answer')

  const invoices = await before(30_000, app.inject({ url: '/api/invoices', headers: bearer(token) }))
  if (invoices === undefined) throw new Error('GET /api/invoices hung with Redis')
  t.equal(invoices.statusCode, 200, 'the token check fails open, the cache read misses, billing answers: a few command timeouts, not a hang')
  t.ok(Array.isArray(invoices.json().invoices), 'the invoices themselves')
  t.ok((await cacheReport(app)).errors > errorsBefore, 'the failed cache commands are counted')

  redis.resume()
  t.type((await app.inject('/health/queues')).json().jobs, 'object', 'job counts again once Redis answers')
})

t.test('Redis at maxmemory refusing writes: /health ok, reads served but not stored, logout 503, limiting stops, nothing announced or queued; all back once it has room', async (t) => {
  const { redis, app } = await privateRedisApp(t)
  const admin = redis.client(t)
  const token = await login(app)
  await admin.config('SET', 'maxmemory-policy', 'noeviction')
  // Any limit below what Redis already uses: every command that may grow memory is refused (OOM).
  await admin.config('SET', 'maxmemory', '1')
  await t.rejects(admin.set('probe', '1'), /OOM/, 'Redis refuses writes')

  const health = await app.inject('/health')
  t.equal(health.statusCode, 200, '/health stays ok: PING answers')
  t.same(health.json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } })

  const bypassed = async () => (await app.monitoring.snapshot()).parts.rateLimitBypassed ?? 0
  const bypassedBefore = await bypassed()
  const reportBefore = await cacheReport(app)
  for (let read = 0; read < 2; read++) {
    const response = await app.inject({ url: '/api/invoices?page=3', headers: bearer(token) })
    t.equal(response.statusCode, 200, `read ${read + 1}: served from billing (the token check only reads)`)
  }
  // The copy is stored after the answer is sent: its failure is counted a moment later.
  await waitFor('both refused SETs counted', async () => (await cacheReport(app)).errors >= reportBefore.errors + 2, 5000)
  const after = await cacheReport(app)
  t.equal(after.hits - reportBefore.hits, 0, 'the copy could not be stored: the second read misses too')
  t.equal(after.misses - reportBefore.misses, 2, 'two misses')
  t.equal(after.errors - reportBefore.errors, 2, 'each refused SET is counted, and nothing else failed')
  t.ok(await bypassed() > bypassedBefore, 'the limiter could not count: requests let through, and counted')

  const logout = await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })
  t.equal(logout.statusCode, 503, 'logout cannot store the revocation')
  t.match(logout.json(), { code: 'AUTH_UNAVAILABLE', message: 'Authentication is temporarily unavailable' })

  const placed = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })
  t.equal(placed.statusCode, 201, 'an order is placed and stored (PostgreSQL holds it)')
  t.same(await app.orders.statusChanges.backlog(1, '0-0'), [], 'its status change is not announced: the backlog entry was refused')
  await t.rejects(app.orders.jobs.enqueue(placed.json().crmOrderId), /OOM/, 'its job cannot be queued, so an event hand-off would be refused')

  await admin.config('SET', 'maxmemory', '0')
  const again = await app.inject({ url: '/api/invoices?page=3', headers: bearer(token) })
  t.equal(again.statusCode, 200)
  await waitFor('a read served from the stored copy', async () => {
    await app.inject({ url: '/api/invoices?page=3', headers: bearer(token) })
    return (await cacheReport(app)).hits > after.hits
  }, 5000)
  t.equal((await cacheReport(app)).errors, after.errors, 'no cache error once Redis has room')
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 204, 'logout works again')
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 401, 'and the token is revoked')
})

t.test('Redis down for seconds: the provisioning job queue writes one line when it starts failing and one when it is back', async (t) => {
  const logDir = tempDir('logs')
  const { redis, app } = await privateRedisApp(t, { LOG_DIR: logDir })
  const lines = () => readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as { message: string, errors?: number })
  const about = (text: string) => lines().filter((line) => line.message.startsWith(`provisioning job queue: Redis ${text}`))
  await redis.stop()
  await new Promise((resolve) => setTimeout(resolve, 3000))
  await redis.start()
  await waitFor('the job queue back', async () => about('recovered').length === 1, 10_000)
  t.equal(about('failing').length, 1, 'one line for the outage')
  t.ok((about('recovered')[0]?.errors ?? 0) > 1, `one line for its end, with the count of errors it stood for (${about('recovered')[0]?.errors ?? 0})`)
  await app.inject('/health/queues')
  t.equal(lines().filter((line) => /worker error|queue error/.test(line.message)).length, 0, 'no line per reconnection attempt')
})

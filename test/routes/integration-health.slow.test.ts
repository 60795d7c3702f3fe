import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { buildTestApp, startTestSandbox, tempDir } from '../helpers/app.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { waitFor } from '../helpers/processes.js'
import type { FastifyInstance } from 'fastify'

const TIMEOUT_MS = 500
const BOUND_MS = TIMEOUT_MS + 250

async function integrationHealth (app: FastifyInstance) {
  await sleep(1000) // a finished run is reused for up to 1 s
  const started = performance.now()
  const response = await app.inject('/auth/health-check')
  return { statusCode: response.statusCode, body: response.json(), elapsed: performance.now() - started }
}

t.test('integration health is ok when every upstream answers', async (t) => {
  const app = await buildTestApp(t)
  const { statusCode, body } = await integrationHealth(app)
  t.equal(statusCode, 200)
  t.match(body, { status: 'ok', checks: { database: { status: 'ok' }, billing: { status: 'ok' }, crm: { status: 'ok' }, telecom: { status: 'ok' }, events: { status: 'disabled' } } })
  for (const check of Object.values(body.checks) as Array<Record<string, unknown>>) {
    t.ok(Number.isInteger(check.latencyMs), 'latency in ms')
    t.notOk('error' in check)
  }
})

t.test('each upstream down or hanging fails only its own check, with a short code, in bounded time', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), INTEGRATION_CHECK_CACHE_MS: '0' }, sandbox)
  const cases = [
    { upstream: 'billing', break: () => sandbox.billing.down(), mend: () => sandbox.billing.up(), error: 'connection_refused' },
    { upstream: 'billing', break: () => sandbox.billing.injectFault({ kind: 'blackhole' }), mend: () => sandbox.billing.clearFaults(), error: 'timeout' },
    { upstream: 'billing', break: () => sandbox.billing.injectFault({ kind: 'http5xx', status: 500 }), mend: () => sandbox.billing.clearFaults(), error: 'http_5xx' },
    { upstream: 'crm', break: () => sandbox.crm.injectFault({ kind: 'blackhole' }), mend: () => sandbox.crm.clearFaults(), error: 'timeout' },
    { upstream: 'crm', break: () => sandbox.crm.down(), mend: () => sandbox.crm.up(), error: 'connection_refused' },
    { upstream: 'telecom', break: () => sandbox.telecom.injectFault({ kind: 'http5xx', status: 503 }), mend: () => sandbox.telecom.clearFaults(), error: 'http_5xx' },
    { upstream: 'telecom', break: () => sandbox.telecom.down(), mend: () => sandbox.telecom.up(), error: 'connection_refused' },
    { upstream: 'telecom', break: () => sandbox.telecom.injectFault({ kind: 'blackhole' }), mend: () => sandbox.telecom.clearFaults(), error: 'timeout' }
  ] as const
  for (const fault of cases) {
    await fault.break()
    const { statusCode, body, elapsed } = await integrationHealth(app)
    t.equal(statusCode, 503, `${fault.upstream} ${fault.error}: 503`)
    t.same(body.checks[fault.upstream], { status: 'fail', latencyMs: body.checks[fault.upstream].latencyMs, error: fault.error }, `${fault.upstream} fails with ${fault.error}`)
    const others = Object.entries(body.checks).filter(([name]) => name !== fault.upstream && name !== 'events')
    t.ok(others.every(([, check]) => (check as { status: string }).status === 'ok'), 'the others stay ok')
    t.same(body.checks.events, { status: 'disabled', latencyMs: 0 }, 'the subscription, disabled, stays disabled')
    t.ok(elapsed <= BOUND_MS, `answered in ${Math.round(elapsed)} ms`)
    t.notMatch(JSON.stringify(body), /ECONN|Error:|127\.0\.0\.1|secret|api\.php/, 'no raw text')
    await fault.mend()
  }
  t.equal((await integrationHealth(app)).statusCode, 200, 'all mended')
})

t.test('an upstream failure a check meets is an error in the error log, without its text', async (t) => {
  const logDir = tempDir('logs')
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { LOG_DIR: logDir, HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), INTEGRATION_CHECK_CACHE_MS: '0' }, sandbox)
  sandbox.telecom.injectFault({ kind: 'http5xx', status: 503, body: 'telecom maintenance page' })
  t.equal((await integrationHealth(app)).statusCode, 503)
  await app.close()
  const errors = readFileSync(join(logDir, 'error.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)
  t.match(errors.find((line) => line.upstream === 'telecom'), { level: 50, upstream: 'telecom', operation: 'status', failure: 'http_5xx', message: 'status: HTTP 503' })
  t.notMatch(JSON.stringify(errors), /maintenance page/, 'the upstream\'s body is not logged')
})

t.test('a hung database fails the database check only', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const app = await buildTestApp(t, { DATABASE_URL: cluster.url, HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), INTEGRATION_CHECK_CACHE_MS: '0' })
  cluster.hang()
  const { body, elapsed } = await integrationHealth(app)
  t.match(body.checks, { database: { status: 'fail', error: 'timeout' }, billing: { status: 'ok' }, crm: { status: 'ok' }, telecom: { status: 'ok' } })
  t.ok(elapsed <= BOUND_MS, `answered in ${Math.round(elapsed)} ms`)
})

t.test('the CRM over its daily quota fails the crm check with quota_exceeded', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), INTEGRATION_CHECK_CACHE_MS: '0' }, sandbox)
  const usage = sandbox.crm.apiUsage
  sandbox.crm.setApiUsage({ used: usage.max })
  const { statusCode, body } = await integrationHealth(app)
  t.equal(statusCode, 503)
  t.match(body.checks, { database: { status: 'ok' }, billing: { status: 'ok' }, crm: { status: 'fail', error: 'quota_exceeded' }, telecom: { status: 'ok' } })
  t.notMatch(JSON.stringify(body), /REQUEST_LIMIT|TotalRequests/, 'the class, not the CRM\'s text')
  sandbox.crm.setApiUsage(usage)
  t.equal((await integrationHealth(app)).statusCode, 200, 'ok again once the CRM has quota')
})

t.test('a stopped database fails the database check only', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const app = await buildTestApp(t, { DATABASE_URL: cluster.url, HEALTH_CHECK_TIMEOUT_MS: String(TIMEOUT_MS), INTEGRATION_CHECK_CACHE_MS: '0' })
  t.equal((await integrationHealth(app)).statusCode, 200)
  await cluster.stop()
  const { statusCode, body, elapsed } = await integrationHealth(app)
  t.equal(statusCode, 503)
  t.match(body.checks, { database: { status: 'fail', error: 'connection_refused' }, billing: { status: 'ok' }, crm: { status: 'ok' }, telecom: { status: 'ok' } })
  t.ok(elapsed <= BOUND_MS, `answered in ${Math.round(elapsed)} ms`)
  t.notMatch(JSON.stringify(body), /ECONN|Connection terminated|127\.0\.0\.1/, 'no driver text')
  await cluster.start()
  await waitFor('the database check to pass again', async () => (await integrationHealth(app)).body.checks.database.status === 'ok')
  t.pass('recovers without restarting the service')
})

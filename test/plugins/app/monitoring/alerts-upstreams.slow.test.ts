import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox } from '../../../helpers/app.js'
import { expectLevel } from '../../../helpers/alerts.js'

// The request and upstream measures, driven through real requests and sandbox faults; each level is
// read from /health/alerts and from the shipped Prometheus rules fed the service's /metrics.

const LIMITS = { LOGIN_RATE_LIMIT_MAX: '10000', LOGIN_ACCOUNT_FAILURES_MAX: '10000', RATE_LIMIT_MAX: '10000' }

function login (app: FastifyInstance) {
  return app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'nobody@example.com', password: 'wrong-password' } })
}

t.test('HTTP 5xx rate: > 1 % warns, > 5 % is critical; probes do not count', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, LIMITS, sandbox)
  for (let i = 0; i < 99; i++) await app.inject('/no-such-route')
  for (let i = 0; i < 50; i++) await app.inject('/health')
  sandbox.billing.injectFault({ kind: 'http5xx', status: 503 })
  const failed = await login(app)
  t.equal(failed.statusCode, 503, 'billing down: login answers 503')
  await expectLevel(t, app, 'http_5xx_rate', 'ok', '1 of 100 requests')
  await login(app)
  await expectLevel(t, app, 'http_5xx_rate', 'warning', '2 of 101 requests')
  for (let i = 0; i < 5; i++) await login(app)
  const critical = await expectLevel(t, app, 'http_5xx_rate', 'critical', '7 of 106 requests')
  t.equal(critical.priority, 'P1')
})

t.test('external error rate: > 1 % warns, > 5 % is critical', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const calls = (n: number) => Promise.allSettled(Array.from({ length: n }, () => app.upstreams.billing.client.health(AbortSignal.timeout(5000))))
  await calls(200)
  sandbox.billing.injectFault({ kind: 'http5xx', status: 502 })
  await calls(1)
  await expectLevel(t, app, 'external_error_rate', 'ok', 'about 0.5 % failed')
  await calls(3)
  await expectLevel(t, app, 'external_error_rate', 'warning', 'about 2 % failed')
  await calls(10)
  await expectLevel(t, app, 'external_error_rate', 'critical', 'about 6.5 % failed')
})

t.test('API p95 (> 2 s, > 5 s), CRM or billing (> 2 s, > 5 s) and telecom (> 3 s, > 10 s) response times', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { ...LIMITS, UPSTREAM_TIMEOUT_MS: '15000', BILLING_QUEUE_TIMEOUT_MS: '20000' }, sandbox)
  const measures = ['api_response_time_p95', 'crm_billing_response_time', 'telecom_response_time'] as const
  await login(app)
  await app.upstreams.telecom.client.health(AbortSignal.timeout(5000))
  for (const measure of measures) {
    const early = await expectLevel(t, app, measure, 'ok', 'one fast answer of each: too few to judge')
    t.match(early, { value: null, note: /too few samples/ })
  }
  // Enough samples to judge on: 20 requests and billing calls, 10 telecom calls.
  for (let i = 0; i < 19; i++) await login(app)
  for (let i = 0; i < 9; i++) await app.upstreams.telecom.client.health(AbortSignal.timeout(5000))
  for (const measure of measures) await expectLevel(t, app, measure, 'ok', 'fast answers')

  // Two slow answers of each at once: beside the fast ones, the 95th percentile is a slow one.
  const slow = async (billingMs: number, telecomMs: number) => {
    sandbox.billing.injectFault({ kind: 'latency', ms: billingMs })
    sandbox.telecom.injectFault({ kind: 'latency', ms: telecomMs })
    const responses = await Promise.all([login(app), login(app), app.upstreams.telecom.client.health(AbortSignal.timeout(15_000)), app.upstreams.telecom.client.health(AbortSignal.timeout(15_000))])
    t.same(responses.slice(0, 2).map((response) => response?.statusCode), [401, 401], 'the slow logins still answer')
    sandbox.billing.clearFaults()
    sandbox.telecom.clearFaults()
  }
  await slow(2100, 3100)
  for (const measure of measures) await expectLevel(t, app, measure, 'warning', 'billing 2.1 s, telecom 3.1 s')
  await slow(5100, 10_100)
  for (const measure of measures) await expectLevel(t, app, measure, 'critical', 'billing 5.1 s, telecom 10.1 s')
})

t.test('the CRM slower than billing: crm_billing_response_time follows the slower of the two', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { UPSTREAM_TIMEOUT_MS: '15000' }, sandbox)
  for (let i = 0; i < 10; i++) await app.upstreams.billing.client.health(AbortSignal.timeout(5000))
  for (let i = 0; i < 10; i++) await app.upstreams.crm.client.getLimits(AbortSignal.timeout(5000))
  await expectLevel(t, app, 'crm_billing_response_time', 'ok', 'both fast')
  sandbox.crm.injectFault({ kind: 'latency', ms: 2100, route: 'rest' })
  // Two slow samples beside the fast ones: the CRM's 95th percentile is a slow one.
  await Promise.all([app.upstreams.crm.client.getLimits(AbortSignal.timeout(15_000)), app.upstreams.crm.client.getLimits(AbortSignal.timeout(15_000))])
  await expectLevel(t, app, 'crm_billing_response_time', 'warning', 'the CRM at 2.1 s, billing fast')
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildTestApp, tempDir } from '../../../helpers/app.js'
import { bearer, login } from '../../../helpers/tokens.js'
import { buildTestAppOnPrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { pino } from 'pino'
import { windowed } from '../../../../plugins/app/monitoring/alerts.js'
import { Monitoring } from '../../../../plugins/app/monitoring/index.js'
import { ServiceMetrics } from '../../../../plugins/app/monitoring/metrics.js'
import { THRESHOLDS } from '../../../../plugins/app/monitoring/thresholds.js'

t.test('GET /health/alerts: every row of the thresholds table, in order, with value, unit, level and thresholds', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject('/health/alerts')
  t.equal(response.statusCode, 200)
  const report = response.json()
  t.match(report, { timestamp: /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, level: 'ok' })
  t.same(report.alerts.map((alert: { measure: string }) => alert.measure), THRESHOLDS.map((row) => row.measure), 'every row of the table, in order')
  for (const [index, row] of THRESHOLDS.entries()) {
    t.match(report.alerts[index], {
      description: row.description,
      unit: row.unit,
      level: 'ok',
      threshold: { comparison: row.comparison, warning: row.warning, critical: row.critical },
      crossed: null,
      priority: null
    }, `${row.measure}`)
  }
  t.same(report.priorities, {
    P1: { respondWithinMinutes: 15, postIncidentReviewWithinBusinessDays: 3 },
    P2: { respondWithinMinutes: 60, postIncidentReviewWithinBusinessDays: 3 },
    P3: { respondWithinMinutes: 240, postIncidentReviewWithinBusinessDays: null },
    P4: { respondWithinMinutes: 1440, postIncidentReviewWithinBusinessDays: null }
  }, 'incident priorities of the specification')

  const document = (await app.inject('/docs/json')).json()
  await t.resolves(SwaggerParser.validate(structuredClone(document)), 'the OpenAPI document stays valid')
  for (const path of ['/health/alerts', '/metrics', '/status/summary']) t.ok(document.paths[path]?.get, `${path} is documented`)
  const dereferenced = await SwaggerParser.dereference(structuredClone(document)) as typeof document
  const alert = dereferenced.paths['/health/alerts'].get.responses['200'].content['application/json'].schema.properties.alerts.items
  t.ok(alert.properties.value && alert.properties.level && alert.properties.threshold && alert.properties.priority, 'the alert row is documented')
})

t.test('a change of core health or alert level is logged once, not on every probe', async (t) => {
  const logDir = tempDir('logs')
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { LOG_DIR: logDir, HEALTH_CHECK_TIMEOUT_MS: '500' })
  const probe = async (times: number) => {
    for (let i = 0; i < times; i++) {
      await app.inject(i % 2 === 0 ? '/health/alerts' : '/status/summary')
    }
  }
  await probe(3)
  await redis.kill()
  await sleep(1000)
  await probe(4)
  t.equal((await app.inject('/health/alerts')).json().level, 'critical')
  await redis.start()
  await waitFor('the cache check to pass', async () => (await app.inject('/health/alerts')).json().level === 'ok', 10_000)
  await probe(3)
  await app.close()

  const lines = readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)
  const about = (message: string) => lines.filter((line) => line.message === message)
  t.equal(about('core health degraded').length, 1, 'degraded core: one line')
  t.match(about('core health degraded')[0], { level: 40, checks: { database: 'ok', cache: 'fail' } }, 'at warn, naming the failing check')
  t.equal(about('alert level critical').length, 1, 'critical: one line')
  t.match(about('alert level critical')[0], { level: 50, alertLevel: 'critical', previousAlertLevel: 'ok', alerts: [{ measure: 'core_status', level: 'critical' }] }, 'at error, naming the rows')
  t.equal(about('core health ok again').length, 1, 'recovery: one line each')
  t.equal(about('alert level ok again').length, 1)
  t.match(about('alert level ok again')[0], { level: 30, alertLevel: 'ok', previousAlertLevel: 'critical' })
  const errors = readFileSync(join(logDir, 'error.log'), 'utf8')
  t.match(errors, /alert level critical/, 'the critical change is in the error log')
})

const quiet = { count: 0, failures: 0, failureRate: null, average: null, p95: null }

function monitoringWithLog () {
  const lines: Array<Record<string, unknown>> = []
  const log = pino({ messageKey: 'message' }, { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } })
  return { lines, monitoring: new Monitoring({ metrics: new ServiceMetrics(), log, readTimeoutMs: 100 }) }
}

t.test('a measure without data has no value, level ok and says why', async (t) => {
  const { monitoring } = monitoringWithLog()
  monitoring.register('http', { description: 'the request log', read: () => quiet, measures: { api_response_time_p95: (http) => windowed(http.p95, http.count, 'requests') } })
  monitoring.register('jobs', {
    description: 'the provisioning job queue',
    read: () => new Promise(() => {}),
    measures: { job_queue_failed: (jobs) => ({ value: jobs.recentFailed }) }
  })
  monitoring.register('cacheMemory', {
    description: 'Redis',
    read: () => Promise.reject(new Error('connection refused')),
    measures: { cache_memory: (memory) => ({ value: memory.usedBytes }) }
  })
  const { snapshot, judgement } = await monitoring.evaluate()
  t.same(Object.keys(snapshot.parts), ['http'], 'a part that failed or did not answer in time is missing')
  t.equal(judgement.level, 'ok')
  const row = (measure: string) => judgement.alerts.find((alert) => alert.measure === measure)
  t.match(row('api_response_time_p95'), { value: null, level: 'ok', note: /no requests in the last 5 minutes/ })
  t.match(row('job_queue_failed'), { value: null, level: 'ok', note: 'no data: the provisioning job queue did not answer' })
  t.match(row('cache_memory'), { value: null, note: 'no data: Redis did not answer' })
  t.match(row('query_duration'), { value: null, note: 'no data: not measured by this service' })
  t.throws(() => monitoring.register('http', { description: 'again', read: () => quiet }), /already registered/)
})

t.test('a part\'s metrics are read from the snapshot, with no sample while the part is unavailable', async (t) => {
  const metrics = new ServiceMetrics()
  const monitoring = new Monitoring({ metrics, log: pino({ enabled: false }), readTimeoutMs: 100 })
  let answering = true
  monitoring.register('rateLimitBypassed', {
    description: 'the rate limiter',
    read: () => answering ? 7 : Promise.reject(new Error('down')),
    metrics: [{ name: 'test_bypassed_total', help: 'a counter', type: 'counter', samples: (count) => [{ value: count }] }]
  })
  t.match(await metrics.text(), /^test_bypassed_total 7$/m)
  answering = false
  t.notMatch(await metrics.text(), /^test_bypassed_total /m, 'no made-up value')
  t.match(await metrics.text(), /# TYPE test_bypassed_total counter/)
})

t.test('the change log: one line per change, at the level of the new state', async (t) => {
  const { lines, monitoring } = monitoringWithLog()
  let queueSize = 0
  const report = (waiting: number) => ({
    health: 'healthy' as const,
    metrics: { totalRequests: 0, completedRequests: 0, failedRequests: 0, queueSize: waiting, pendingRequests: 0, averageWaitTime: 0, averageExecutionTime: 0 },
    recentFailedRequests: 0
  })
  monitoring.register('queues', {
    description: 'the request queues',
    read: () => ({ billing: report(queueSize), crm: report(0) }),
    measures: { billing_queue_size: ({ billing }) => ({ value: billing.metrics.queueSize }) }
  })
  for (const size of [11, 12, 60, 20, 0]) {
    queueSize = size
    await monitoring.evaluate()
  }
  t.same(lines.map((line) => [line.level, line.message]), [[40, 'alert level warning'], [50, 'alert level critical'], [40, 'alert level warning'], [30, 'alert level ok again']])
})

t.test('a share or percentile is judged only on enough samples: below the row\'s minimum it is null, ok, and says so', async (t) => {
  const { monitoring } = monitoringWithLog()
  let window = { count: 5, failures: 4, failureRate: 80, average: 9000, p95: 9000 }
  monitoring.register('http', {
    description: 'the request log',
    read: () => window,
    measures: {
      api_response_time_p95: (http) => windowed(http.p95, http.count, 'requests'),
      http_5xx_rate: (http) => windowed(http.failureRate, http.count, 'requests')
    }
  })
  const row = async (measure: string) => (await monitoring.evaluate()).judgement.alerts.find((alert) => alert.measure === measure)
  t.match(await row('http_5xx_rate'), { value: null, level: 'ok', note: 'too few samples to judge: 5 of the 20 needed in the last 5 minutes' })
  t.match(await row('api_response_time_p95'), { value: null, level: 'ok', note: /too few samples/ })
  window = { count: 20, failures: 4, failureRate: 20, average: 9000, p95: 9000 }
  t.match(await row('http_5xx_rate'), { value: 20, level: 'critical' }, 'twenty requests are judged')
  t.match(await row('api_response_time_p95'), { value: 9000, level: 'critical' })
})

t.test('a fresh instance, a sign-in and five invoice reads: every row ok, the overall level ok', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)
  for (let i = 0; i < 5; i++) t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200)
  const report = (await app.inject('/health/alerts')).json()
  t.same(report.alerts.filter((alert: { level: string }) => alert.level !== 'ok').map((alert: { measure: string }) => alert.measure), [], 'no row warns')
  t.equal(report.level, 'ok')
  t.match(report.alerts.find((alert: { measure: string }) => alert.measure === 'cache_hit_rate'), { value: null, note: /too few samples to judge: 5 of the 20/ }, 'one hit in five reads is not yet a hit rate')
})

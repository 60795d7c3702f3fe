import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildTestApp, tempDir } from './helpers/app.js'
import { buildTestAppOnPrivateRedis } from './helpers/private-redis.js'
import { waitFor } from './helpers/processes.js'
import { ChangeLog, judge, readingsOf, type MonitoringSnapshot } from '../plugins/app/monitoring/alerts.js'
import { THRESHOLDS } from '../plugins/app/monitoring/thresholds.js'

t.test('GET /health/alerts: every row of the thresholds table, in order, with value, unit, level and thresholds', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject('/health/alerts')
  t.equal(response.statusCode, 200)
  const report = response.json()
  t.match(report, { timestamp: /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, level: 'ok' })
  t.same(report.alerts.map((alert: { measure: string }) => alert.measure), THRESHOLDS.map((row) => row.measure), 'the sixteen rows of seed §8, in order')
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
  }, 'incident priorities of seed §8')

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

function snapshot (overrides: Partial<MonitoringSnapshot> = {}): MonitoringSnapshot {
  const queue = { health: 'healthy' as const, metrics: { totalRequests: 0, completedRequests: 0, failedRequests: 0, queueSize: 0, pendingRequests: 0, averageWaitTime: 0, averageExecutionTime: 0 }, recentFailedRequests: 0 }
  return {
    timestamp: new Date().toISOString(),
    core: { status: 'ok', checks: { database: 'ok', cache: 'ok' } },
    billing: queue,
    crm: { ...queue, dailyUsage: { used: 0, limit: null, percent: null, limitSource: 'unknown' } },
    jobs: 'absent',
    subscriber: 'absent',
    http: quiet,
    upstreams: { billing: quiet, crm: quiet, telecom: quiet },
    cache: { hitRate: null, latencyP95Ms: null, memory: null },
    database: { inUse: 0, idle: 0, waiting: 0, max: 10, queries: quiet },
    ...overrides
  }
}

t.test('a measure without data has no value, level ok and says why', async (t) => {
  const { level, alerts } = judge(readingsOf(snapshot()))
  t.equal(level, 'ok')
  const row = (measure: string) => alerts.find((alert) => alert.measure === measure)
  t.match(row('job_queue_waiting'), { value: null, level: 'ok', note: /no data: the provisioning job queue is not part/ })
  t.match(row('crm_daily_usage'), { value: null, note: /no data/ })
  t.match(row('cache_memory'), { value: null, note: /Redis did not answer/ })
  t.match(row('api_response_time_p95'), { value: null, note: /no requests in the last 5 minutes/ })
  const unavailable = judge(readingsOf(snapshot({ jobs: 'unavailable' })))
  t.match(unavailable.alerts.find((alert) => alert.measure === 'job_queue_failed'), { value: null, note: /did not answer/ })
})

t.test('the change log: one line per change, at the level of the new state', async (t) => {
  const lines: Array<[string, string]> = []
  const log = { info: (_: object, message: string) => lines.push(['info', message]), warn: (_: object, message: string) => lines.push(['warn', message]), error: (_: object, message: string) => lines.push(['error', message]) }
  const changes = new ChangeLog(log)
  const ok = snapshot()
  const at = (measure: string, value: number) => judge({ ...readingsOf(ok), [measure]: { value } })
  changes.observe(ok.core, at('billing_queue_size', 11))
  changes.observe(ok.core, at('billing_queue_size', 12))
  changes.observe(ok.core, at('billing_queue_size', 60))
  changes.observe(ok.core, at('billing_queue_size', 20))
  changes.observe(ok.core, judge(readingsOf(ok)))
  t.same(lines, [['warn', 'alert level warning'], ['error', 'alert level critical'], ['warn', 'alert level warning'], ['info', 'alert level ok again']])
})

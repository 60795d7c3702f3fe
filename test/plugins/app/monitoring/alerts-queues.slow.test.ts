import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox } from '../../../helpers/app.js'
import { expectLevel } from '../../../helpers/alerts.js'
import type { JobCounts } from '../../../../plugins/app/orders/provisioning.js'
import type { MeasureName } from '../../../../plugins/app/monitoring/thresholds.js'
import type { Level } from '../../../../plugins/app/monitoring/levels.js'

// Each row driven past its thresholds: /health/alerts, the queue's own `health`, and the shipped
// Prometheus rules fed the service's /metrics at that moment all say the same level.

const HEALTH: Record<Level, string> = { ok: 'healthy', warning: 'degraded', critical: 'unhealthy' }

async function billingHealth (app: FastifyInstance) {
  return (await app.inject('/health/queues')).json().billing.health
}

function billingCall (app: FastifyInstance) {
  return app.upstreams.billing.queue.run((deadline) => app.upstreams.billing.client.health(deadline))
}

t.test('billing queueSize: > 10 warns, > 50 is critical', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_QUEUE_CONCURRENCY: '1', BILLING_QUEUE_MAX_SIZE: '100', BILLING_QUEUE_TIMEOUT_MS: '150000', UPSTREAM_TIMEOUT_MS: '120000' }, sandbox)
  // One call held unanswered until the billing simulator's connections are ended below holds the
  // others waiting while the levels are read, however long a busy machine takes to read them
  // (promtool included): a fixed delay ran out first on a loaded machine, and the queue drained.
  sandbox.billing.injectFault({ kind: 'blackhole', times: 1 })
  const calls: Array<Promise<unknown>> = []
  const enqueue = (n: number) => { for (let i = 0; i < n; i++) calls.push(billingCall(app).catch(() => {})) }

  enqueue(11)
  await sleep(50)
  await expectLevel(t, app, 'billing_queue_size', 'ok', '10 waiting')
  t.equal(await billingHealth(app), 'healthy')
  enqueue(1)
  await expectLevel(t, app, 'billing_queue_size', 'warning', '11 waiting')
  t.equal(await billingHealth(app), HEALTH.warning, 'queue health agrees')
  enqueue(40)
  const critical = await expectLevel(t, app, 'billing_queue_size', 'critical', '51 waiting')
  t.equal(critical.priority, 'P3', 'a critical row names the priority it routes to: a full queue is a ticket, its failures page')
  t.equal(await billingHealth(app), HEALTH.critical, 'queue health agrees')

  sandbox.billing.clearFaults()
  // The held call's connection ends; the waiting ones are answered.
  await sandbox.billing.down()
  await sandbox.billing.up()
  await Promise.all(calls)
})

t.test('billing failedRequests: > 5 warns, > 20 is critical', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  sandbox.billing.injectFault({ kind: 'http5xx', status: 503 })
  const fail = async (times: number) => { await Promise.allSettled(Array.from({ length: times }, () => billingCall(app))) }

  await fail(5)
  await expectLevel(t, app, 'billing_failed_requests', 'ok', '5 failures')
  t.equal(await billingHealth(app), 'healthy')
  await fail(1)
  await expectLevel(t, app, 'billing_failed_requests', 'warning', '6 failures')
  t.equal(await billingHealth(app), HEALTH.warning, 'queue health agrees')
  await fail(15)
  await expectLevel(t, app, 'billing_failed_requests', 'critical', '21 failures')
  t.equal(await billingHealth(app), HEALTH.critical, 'queue health agrees')
})

t.test('CRM daily usage: > 80 % of the limit warns, > 95 % is critical', async (t) => {
  const sandbox = await startTestSandbox(t, { crm: { apiUsage: { used: 11_000, max: 15_000 } } })
  const app = await buildTestApp(t, {}, sandbox)
  const crmCall = () => app.upstreams.crm.queue.run((deadline) => app.upstreams.crm.client.getLimits(deadline))

  await crmCall()
  await expectLevel(t, app, 'crm_daily_usage', 'ok', 'about 73 %')
  sandbox.crm.setApiUsage({ used: 12_300 })
  await crmCall()
  const warning = await expectLevel(t, app, 'crm_daily_usage', 'warning', 'about 82 %')
  t.ok(warning.value! > 80 && warning.value! < 95, `value in percent: ${warning.value}`)
  const crm = (await app.inject('/health/queues/crm')).json()
  t.equal(crm.dailyUsage.level, 'warning', 'the CRM queue detail agrees')
  sandbox.crm.setApiUsage({ used: 14_400 })
  await crmCall()
  t.equal(warning.priority, 'P4', 'a warning is a ticket')
  const critical = await expectLevel(t, app, 'crm_daily_usage', 'critical', 'about 96 %')
  t.equal(critical.priority, 'P3', 'nearing the quota is a ticket: the failures past it page')
  t.equal((await app.inject('/health/queues/crm')).json().dailyUsage.level, 'critical', 'the CRM queue detail agrees')
})

/**
 * The job queue's counts, set through its `counts()` (the source of the measure): the test cannot
 * hold 51 real jobs waiting while the worker runs.
 */
function setJobCounts (app: FastifyInstance, counts: Partial<JobCounts>) {
  const fake = async (): Promise<JobCounts> => ({ waiting: 0, active: 0, delayed: 0, failed: 0, completed: 0, recentFailed: 0, ...counts })
  app.orders.jobs.counts = fake
}

async function jobsHealth (app: FastifyInstance): Promise<string | undefined> {
  return (await app.inject('/health/queues')).json().jobs?.health
}

t.test('job queue waiting (> 10, > 50) and recently failed (> 5, > 20) jobs', async (t) => {
  const app = await buildTestApp(t)
  const cases: Array<[MeasureName, Partial<JobCounts>, Level]> = [
    ['job_queue_waiting', { waiting: 10 }, 'ok'],
    ['job_queue_waiting', { waiting: 11 }, 'warning'],
    ['job_queue_waiting', { waiting: 51 }, 'critical'],
    ['job_queue_failed', { failed: 5, recentFailed: 5 }, 'ok'],
    ['job_queue_failed', { failed: 6, recentFailed: 6 }, 'warning'],
    ['job_queue_failed', { failed: 21, recentFailed: 21 }, 'critical'],
    // Failed jobs are kept 30 days for inspection; only those of the recent window count.
    ['job_queue_failed', { failed: 40, recentFailed: 0 }, 'ok']
  ]
  for (const [measure, counts, level] of cases) {
    setJobCounts(app, counts)
    await expectLevel(t, app, measure, level, JSON.stringify(counts))
    const health = await jobsHealth(app)
    if (health !== undefined) t.equal(health, HEALTH[level], 'the job queue\'s health agrees')
  }
})

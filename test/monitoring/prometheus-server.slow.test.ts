import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import { FOR } from '../../dev/scripts/alert-rules.js'
import { buildTestApp, startTestSandbox, testEnv, testSchemaUrl } from '../helpers/app.js'
import { AlertmanagerServer, PrometheusServer, type PrometheusAlert } from '../helpers/monitoring-servers.js'
import { skipWithout } from '../helpers/packages.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { approvedAgo } from '../helpers/provisioning.js'
import { startService } from '../helpers/service-process.js'
import { bearer, login } from '../helpers/tokens.js'

// The shipped rules in a real Prometheus server (Debian's package), scraping running instances
// every second: what an operator's Prometheus would page on, for five instances side by side.
//   quiet:   fresh and healthy, a sign-in and invoice reads now and then: nothing pending, ever.
//   billing: billing answers 500 to every invoice read: the billing alerts fire.
//   stuck:   events off and an order the CRM approved over an hour ago still in Pending Review: the
//            stuck-order alert fires.
//   redis:   its Redis killed: /metrics still answers at once, and the core-status alert fires.
//   frozen:  a process stopped with SIGSTOP: the instance-down alert fires.
// Each alert must fire within its `for:` and this margin: a scrape (1 s), its timeout (1 s) and an
// evaluation (1 s), on a loaded machine.
const MARGIN_S = 15
const seconds = (duration: string) => Number.parseInt(duration, 10) * (duration.endsWith('m') ? 60 : 1)
const BOUND_S = { P1: seconds(FOR.P1) + MARGIN_S, P2: seconds(FOR.P2) + MARGIN_S }

t.setTimeout((BOUND_S.P2 + 120) * 1000)

async function listen (app: FastifyInstance): Promise<string> {
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  return new URL(url).host
}

/** Scrape-like reads of /metrics: the slowest answer, in ms. */
async function slowestMetrics (address: string, reads: number): Promise<number> {
  let slowest = 0
  for (let i = 0; i < reads; i++) {
    const started = performance.now()
    const response = await fetch(`http://${address}/metrics`)
    await response.text()
    slowest = Math.max(slowest, performance.now() - started)
  }
  return slowest
}

t.test('a real Prometheus with the shipped rules: quiet when healthy, pages on billing down, stuck orders, Redis down and a frozen instance', { skip: skipWithout(['prometheus', 'prometheus-alertmanager']) }, async (t) => {
  const sandbox = await startTestSandbox(t)
  const limits = { RATE_LIMIT_MAX: '10000', LOGIN_RATE_LIMIT_MAX: '10000' }
  const quiet = await buildTestApp(t, limits, sandbox)
  const billingSandbox = await startTestSandbox(t)
  const billing = await buildTestApp(t, limits, billingSandbox)
  const stuck = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'false' }, sandbox)
  const { app: redisApp, redis } = await buildTestAppOnPrivateRedis(t, {}, sandbox)
  const frozen = await startService(testEnv({ ...sandbox.settings, DATABASE_URL: await testSchemaUrl(t), CRM_EVENTS_ENABLED: 'false' }))
  t.teardown(async () => {
    if (frozen.child.pid !== undefined && frozen.child.exitCode === null) {
      process.kill(frozen.child.pid, 'SIGCONT')
      frozen.child.kill('SIGKILL')
      await frozen.exit
    }
  })
  const instances = {
    quiet: await listen(quiet),
    billing: await listen(billing),
    stuck: await listen(stuck),
    redis: await listen(redisApp),
    frozen: new URL(frozen.url).host
  }
  const alertmanager = await AlertmanagerServer.start()
  t.teardown(() => alertmanager.stop())
  const prometheus = await PrometheusServer.start({ targets: Object.values(instances).map((address) => ({ address })), alertmanager: alertmanager.address })
  t.teardown(() => prometheus.stop())

  // Every alert pending or firing on any instance, polled each second: when each first fired.
  const firstFiring = new Map<string, number>()
  const seen: PrometheusAlert[] = []
  const stopPolling = new AbortController()
  const started = performance.now()
  const key = (alert: { alertname?: string, severity?: string, instance?: string }) => `${alert.alertname ?? '?'} ${alert.severity ?? '?'} ${alert.instance ?? '?'}`
  const polling = (async () => {
    while (!stopPolling.signal.aborted) {
      for (const alert of await prometheus.alerts().catch(() => [])) {
        seen.push(alert)
        if (alert.state === 'firing' && !firstFiring.has(key(alert.labels))) firstFiring.set(key(alert.labels), performance.now())
      }
      await sleep(1000)
    }
  })()

  // Light portal traffic on the quiet instance, and the faults of the others, from the start.
  const token = await login(quiet)
  const reads = async () => {
    for (let i = 0; i < 5; i++) t.equal((await quiet.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200)
  }
  await reads()
  const traffic = setInterval(() => { reads().catch(() => {}) }, 20_000)
  t.teardown(() => clearInterval(traffic))

  const billingToken = await login(billing)
  billingSandbox.billing.injectFault({ kind: 'http5xx', status: 500 })
  const faultsAt: Record<string, number> = {}
  for (let i = 0; i < 40; i++) {
    t.equal((await billing.inject({ url: '/api/invoices', headers: bearer(billingToken) })).statusCode, 503, 'billing down: the read fails with 503')
    if (i === 19) faultsAt.billing = performance.now()
    await sleep(500)
  }
  // Reads go on failing: an alert holds only while its failures do (decision 0058).
  const failing = setInterval(() => { billing.inject({ url: '/api/invoices', headers: bearer(billingToken) }).catch(() => {}) }, 1000)
  t.teardown(() => clearInterval(failing))

  const order = await stuck.inject({ method: 'POST', url: '/api/orders', headers: bearer(await login(stuck)), payload: { productId: 1, billingCycle: 'monthly' } })
  t.equal(order.statusCode, 201, 'an order is placed')
  await approvedAgo(stuck, order.json().id, 7200)
  faultsAt.stuck = performance.now()

  await redis.kill()
  faultsAt.redis = performance.now()
  const slowest = await slowestMetrics(instances.redis, 10)
  // It serves each part as last read: an answer that waited on Redis would take its command timeout
  // (REDIS_COMMAND_TIMEOUT_MS, 1 s by default), so half of it is the bound, not the machine's speed.
  t.ok(slowest < 500, `Redis down: /metrics answers without waiting on Redis (slowest of 10: ${Math.round(slowest)} ms, bound 500 ms)`)

  process.kill(frozen.child.pid!, 'SIGSTOP')
  faultsAt.frozen = performance.now()

  const expected = [
    { alertname: 'PortalBffBillingFailedRequests', severity: 'critical', instance: instances.billing, since: 'billing', bound: BOUND_S.P2 },
    // Of state every instance shares (the database): judged once for the job, with no instance label.
    { alertname: 'PortalBffOrdersPendingAge', severity: 'critical', instance: undefined, since: 'stuck', bound: BOUND_S.P2 },
    { alertname: 'PortalBffCoreStatus', severity: 'critical', instance: instances.redis, since: 'redis', bound: BOUND_S.P1 },
    { alertname: 'PortalBffInstanceDown', severity: 'critical', instance: instances.frozen, since: 'frozen', bound: BOUND_S.P1 }
  ]
  const deadline = Math.max(...expected.map(({ since, bound }) => faultsAt[since]! + bound * 1000))
  while (performance.now() < deadline && !expected.every((alert) => firstFiring.has(key(alert)))) await sleep(1000)
  stopPolling.abort()
  await polling

  for (const alert of expected) {
    const firedAt = firstFiring.get(key(alert))
    const after = firedAt === undefined ? undefined : (firedAt - faultsAt[alert.since]!) / 1000
    t.ok(after !== undefined && after <= alert.bound, `${alert.alertname} ${alert.severity} fired ${after === undefined ? 'never' : `${after.toFixed(1)} s`} after the fault (bound ${alert.bound} s)`)
  }
  // The quiet instance runs in this process, beside the others: on a loaded machine one of its
  // scrapes can outlast the test's 1 s timeout (the shipped one is 5 s), and instance down is then
  // pending for that scrape. Only then is that pending alert left out; nothing may ever fire.
  const [quietUp] = await prometheus.query(`min_over_time(up{instance="${instances.quiet}"}[10m])`)
  const missedScrape = quietUp?.value[1] === '0'
  if (missedScrape) t.comment('the quiet instance missed a scrape: instance down may be pending, never firing')
  const onQuiet = seen.filter((alert) => alert.labels.instance === instances.quiet &&
    !(missedScrape && alert.labels.alertname === 'PortalBffInstanceDown' && alert.state === 'pending'))
  t.same([...new Set(onQuiet.map((alert) => key(alert.labels)))], [], `the quiet instance: nothing pending or firing in ${Math.round((performance.now() - started) / 1000)} s of light traffic`)
  const up = await prometheus.query(`min_over_time(up{instance="${instances.redis}"}[10m])`)
  t.equal(up[0]?.value[1], '1', 'Redis down: no scrape of that instance failed or timed out')

  // What reaches a person: the rules hold back the pages a cause explains (the 5xx of billing
  // failing and of Redis down), and the shipped Alertmanager configuration silences the
  // consequences (the failed reads' cache misses, say).
  const causes = new Set([
    ...expected.map(key),
    key({ alertname: 'PortalBffExternalErrorRate', severity: 'critical', instance: instances.billing }),
    // The dead man's switch, always firing.
    key({ alertname: 'Watchdog', severity: 'none', instance: undefined })
  ])
  const received = await alertmanager.alerts()
  const active = received.filter((alert) => alert.status.state === 'active').map((alert) => key(alert.labels))
  t.same(active.filter((alert) => !causes.has(alert)), [], 'Alertmanager: nothing active but the causes')
  t.same(expected.map(key).filter((alert) => !active.includes(alert)), [], 'Alertmanager: every expected alert is active')
  for (const alert of received.filter((candidate) => candidate.status.state !== 'active')) {
    t.ok(alert.status.inhibitedBy.length > 0, `${key(alert.labels)} is inhibited`)
  }
  t.comment(`inhibited: ${received.filter((alert) => alert.status.state !== 'active').map((alert) => key(alert.labels)).join('; ') || 'none'}`)
})

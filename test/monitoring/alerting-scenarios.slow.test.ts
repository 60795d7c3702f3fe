import t, { type Test } from 'tap'
import { parse } from 'yaml'
import type { FastifyInstance } from 'fastify'
import { Queue } from 'bullmq'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { FIRING_ALERTS_EXPR, FOR, RECENT_WINDOW, RULES_FILE, SERVICE_PANELS, panelExpr } from '../../dev/scripts/alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { THRESHOLDS } from '../../plugins/app/monitoring/thresholds.js'
import { PROVISIONING_QUEUE } from '../../plugins/app/orders/provisioning-job.js'
import { jobQueuePrefix } from '../../plugins/app/redis-keys.js'
import { buildTestApp, startTestSandbox } from '../helpers/app.js'
import { ALERTMANAGER_CONFIG, AlertmanagerServer, operatorAlertmanagerConfig, receiversAt, PrometheusServer, rulesWithShorterDurations, WebhookReceiver, type AlertmanagerAlert, type Notification, type PrometheusAlert } from '../helpers/monitoring-servers.js'
import { SHARED_REDIS } from '../helpers/made.js'
import { skipWithout } from '../helpers/packages.js'
import { freePort } from '../helpers/ports.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'
import { allActive, eventsReport, placeOrder, seedCrmOrders, STREAMING } from '../helpers/provisioning.js'
import { bearer, login } from '../helpers/tokens.js'

// The shipped monitoring run for real: Debian's Prometheus 2.42 and Alertmanager 0.25 on the files
// of deploy/monitoring, scraping a running instance, notifying a webhook receiver of the test's.
// Each scenario is a run of its own. What differs from the shipped files: the scrape target is the
// test's instance (127.0.0.1:3000 shipped), Prometheus sends to the test's Alertmanager
// (127.0.0.1:9093), the receivers are set to the test's webhook receiver as docs/operations.md says,
// and the operations token file holds the test's token.
//
// The repeated outages (Redis, billing) run on exactly that, in real time: every interval and rule
// as shipped, since how an incident reaches the pager depends on timings no scale keeps (Prometheus
// re-sends a resolved alert every minute for 15 minutes; a new Alertmanager group of an old alert
// flushes at once). To stay within CI's time, the two run side by side, each with its own
// Prometheus, Alertmanager and instance, from the file's start, beside the other scenarios; and
// only the outages are short: each lasts 2 minutes (or until its page came and 10 s more), and
// the second starts 5 minutes after the first did, 3 minutes after it ended, long after its
// resolve, within Prometheus's 15 minutes of re-sending it. About 11 minutes in all.
//
// The other scenarios (a quiet instance, orders waiting, no instance) run twelve times faster:
// every rule's `for:` (a page's 1m is 5 s here, a ticket's 5m and 10m are 25 s and 50 s), the
// rules' last-minute window (1m: 5 s), Alertmanager's group_wait and group_interval (a page's 30 s
// and 1m: 2.5 s and 5 s), scrape and evaluation (15 s: 1.25 s); a scrape timeout of 1 s (5 s).
// The measures' 5-minute windows and the repeat intervals stay.
const SCALE = 12
// A loaded machine: a scrape that waits, an evaluation late, the test's own polling.
const MARGIN_S = 10

/** Seconds of a Prometheus duration: `1m`, `67s500ms`. */
function seconds (duration: string): number {
  const parts = [...duration.matchAll(/(\d+)(ms|s|m|h)/g)]
  if (parts.length === 0 || parts.map(([part]) => part).join('') !== duration) throw new Error(`not a duration: ${duration}`)
  return parts.reduce((sum, [, value, unit]) => sum + Number(value) * { ms: 0.001, s: 1, m: 60, h: 3600 }[unit as 'ms' | 's' | 'm' | 'h'], 0)
}
const shorter = (scale: number) => (duration: string) => `${Math.round(seconds(duration) * 1000 / scale)}ms`

const SHIPPED_PROMETHEUS = readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/prometheus.yml'), 'utf8')
const SHIPPED_INTERVAL_S = seconds((parse(SHIPPED_PROMETHEUS) as { global: { evaluation_interval: string } }).global.evaluation_interval)
/** The page route of the shipped alertmanager.yml. */
const PAGE_ROUTE = ((parse(readFileSync(join(projectRoot, ALERTMANAGER_CONFIG), 'utf8')) as { route: { routes: Array<{ receiver: string, group_wait: string, group_interval: string }> } })
  .route.routes.find((route) => route.receiver === 'pager'))!

/** The shipped timings a page and its resolve go by, at a scale. */
function bounds (scale: number) {
  const interval = SHIPPED_INTERVAL_S / scale
  const pageFor = seconds(FOR.P1) / scale
  const groupWait = seconds(PAGE_ROUTE.group_wait) / scale
  const groupInterval = seconds(PAGE_ROUTE.group_interval) / scale
  return {
    interval,
    pageFor,
    groupInterval,
    /**
     * A page reaches the pager this long after its fault, at most: the traffic crosses the thresholds
     * (the scenarios' traffic does within a few seconds), `for:`, a scrape and an evaluation, the page
     * route's group_wait (or its group_interval, when its group still exists from an earlier incident).
     */
    page: 5 + pageFor + 2 * interval + Math.max(groupWait, groupInterval) + MARGIN_S,
    /** Its "resolved" this long after recovery, at most: the rules' last-minute window, a scrape and an evaluation, the page route's group_interval. */
    resolve: seconds(RECENT_WINDOW) / scale + 2 * interval + groupInterval + MARGIN_S
  }
}
const SCALED = bounds(SCALE)
/** After the resolve, nothing more arrives for this long: past a ticket's `for:` and group_wait. */
const WATCH_S = 25

const OPS_TOKEN = 'an-operations-token-of-the-test'
const LIMITS = { RATE_LIMIT_MAX: '100000', LOGIN_RATE_LIMIT_MAX: '100000', LOGIN_ACCOUNT_FAILURES_MAX: '100000', OPS_TOKEN }

t.setTimeout(16 * 60_000)

function shippedRules (scale: number): string {
  const text = readFileSync(join(projectRoot, RULES_FILE), 'utf8')
  return scale === 1 ? text : rulesWithShorterDurations(text, shorter(scale), [RECENT_WINDOW])
}

function shippedAlertmanager (receiver: string, scale: number): string {
  const config = operatorAlertmanagerConfig(receiversAt(receiver))
  return scale === 1 ? config : config.replace(/^( +(?:group_wait|group_interval): )(\S+)$/gm, (_, key: string, duration: string) => `${key}${shorter(scale)(duration)}`)
}

function shippedPrometheus (target: string, alertmanager: string, scale: number): string {
  const text = SHIPPED_PROMETHEUS
  let changed = text.replace("targets: ['127.0.0.1:3000']", `targets: ['${target}']`).replace("targets: ['127.0.0.1:9093']", `targets: ['${alertmanager}']`)
  if (scale !== 1) {
    changed = changed.replace(/^( +(?:scrape_interval|evaluation_interval): )15s$/gm, `$1${SHIPPED_INTERVAL_S * 1000 / scale}ms`).replace(/^( +scrape_timeout: )5s$/m, '$11s')
  }
  if (changed.split('\n').filter((line, index) => line !== text.split('\n')[index]).length !== (scale === 1 ? 2 : 5)) throw new Error('prometheus.yml no longer has the shipped addresses and intervals')
  return changed
}

interface Monitoring { prometheus: PrometheusServer, alertmanager: AlertmanagerServer, receiver: WebhookReceiver }

/** Prometheus, Alertmanager and a webhook receiver on the shipped files (at a scale), watching `target`; ended with the test. */
async function monitor (t: Test, target: string, scale = SCALE): Promise<Monitoring> {
  const receiver = await WebhookReceiver.start()
  t.teardown(() => receiver.stop())
  const alertmanager = await AlertmanagerServer.start({ config: shippedAlertmanager(receiver.address, scale) })
  t.teardown(() => alertmanager.stop())
  const prometheus = await PrometheusServer.withFiles({
    'prometheus.yml': shippedPrometheus(target, alertmanager.address, scale),
    'alerts.yml': shippedRules(scale),
    'portal-bff-ops-token': OPS_TOKEN
  })
  t.teardown(() => prometheus.stop())
  return { prometheus, alertmanager, receiver }
}

async function listen (app: FastifyInstance): Promise<string> {
  return new URL(await app.listen({ port: 0, host: '127.0.0.1' })).host
}

/** Calls `request` every `everyMs` until the test ends, without waiting for the last to finish. */
function steady (t: Test, everyMs: number, request: (tick: number) => Promise<unknown>): void {
  let tick = 0
  const timer = setInterval(() => { request(tick++).catch(() => {}) }, everyMs)
  t.teardown(() => clearInterval(timer))
}

const pages = (receiver: WebhookReceiver) => receiver.notifications.filter((notification) => notification.path === '/pager')
const others = (receiver: WebhookReceiver) => receiver.notifications.filter((notification) => notification.path !== '/pager')
const alertKey = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).sort())
const describe = (notification: Notification) => `${notification.path} ${notification.body.status}: ${notification.body.alerts.map((alert) => `${alert.labels.alertname ?? '?'} ${alert.labels.severity ?? '?'} ${alert.status}`).join(', ')}`
const names = (notification: Notification | undefined) => (notification?.body.alerts ?? []).map((alert) => `${alert.labels.alertname ?? '?'} ${alert.labels.severity ?? '?'}`).sort()
/** A notification as the test prints it: when it came (UTC, and seconds after `since`), and what it says. */
const stamped = (notification: Notification, since: number) => `${new Date(performance.timeOrigin + notification.at).toISOString()} (+${((notification.at - since) / 1000).toFixed(1)} s) ${describe(notification)}`

/** A dashboard panel's query as Grafana sends it with every instance chosen. */
async function panelData (prometheus: PrometheusServer, expr: string) {
  return await prometheus.query(expr.replaceAll('$instance', '.+'))
}

/**
 * An outage and its recovery, watched: the one page within its bound, the one "resolved" within
 * its bound, nothing else at all. `during` runs while the page is open.
 */
async function outage (t: Test, { receiver }: Monitoring, { fault, mend, during }: { fault: () => Promise<unknown>, mend: () => Promise<unknown>, during?: () => Promise<void> }): Promise<Notification> {
  const startedAt = performance.now()
  await fault()
  const faultAt = performance.now()
  await waitFor('the page', async () => pages(receiver).length > 0, SCALED.page * 1000).catch(() => {})
  const page = pages(receiver)[0]
  t.ok(page !== undefined, `paged ${page === undefined ? 'never' : `${((page.at - faultAt) / 1000).toFixed(1)} s`} after the fault (bound ${SCALED.page} s)`)
  await during?.()
  // The outage goes on a while: nothing more is sent for it.
  await sleep(2 * SCALED.groupInterval * 1000)
  t.equal(pages(receiver).length, 1, 'one page while the outage goes on', { notifications: receiver.notifications.map(describe) })

  await mend()
  const recoveredAt = performance.now()
  await waitFor('the resolve', async () => pages(receiver).length > 1, SCALED.resolve * 1000).catch(() => {})
  const resolved = pages(receiver)[1]
  t.ok(resolved !== undefined, `resolved ${resolved === undefined ? 'never' : `${((resolved.at - recoveredAt) / 1000).toFixed(1)} s`} after recovery (bound ${SCALED.resolve} s)`)
  t.equal(resolved?.body.status, 'resolved', 'the notification after recovery is the resolve')
  t.ok(resolved?.body.alerts.every((alert) => alert.status === 'resolved'), 'every alert resolved at once')
  t.same(names(resolved), names(page), 'the alerts of the page, and no other')
  await sleep(WATCH_S * 1000)
  for (const notification of receiver.notifications) t.comment(stamped(notification, startedAt))
  t.equal(pages(receiver).length, 2, `nothing paged in the ${WATCH_S} s after the resolve, although the 5-minute windows still hold the outage`, { notifications: receiver.notifications.map(describe) })
  t.same(others(receiver).map(describe), [], 'no ticket, nothing to the default receiver')
  return page!
}

/** What a repeated outage did, for the assertions of its subtest. */
interface RepeatedRun {
  startedAt: number
  faults: number[]
  recoveries: number[]
  notifications: Notification[]
  /** The alerts Prometheus holds pending or firing, and Alertmanager active, once the last resolve came and a minute more. */
  promAfter: PrometheusAlert[]
  amAfter: AlertmanagerAlert[]
  during: Record<string, unknown>
}

const REAL = bounds(1)
const OUTAGE_S = 120
const APART_S = 300
/** After the second resolve, nothing more arrives for this long (the page after recovery came 58 s after it). */
const REAL_WATCH_S = 75

/**
 * An outage repeated 5 minutes after it started, on the shipped files in real time: each lasts
 * OUTAGE_S, or until its page came and 10 s more.
 */
async function repeatedOutage (monitoring: Monitoring, { fault, mend, during }: { fault: () => Promise<unknown>, mend: () => Promise<unknown>, during?: () => Promise<Record<string, unknown>> }): Promise<RepeatedRun> {
  const { receiver, prometheus, alertmanager } = monitoring
  const run: RepeatedRun = { startedAt: performance.now(), faults: [], recoveries: [], notifications: receiver.notifications, promAfter: [], amAfter: [], during: {} }
  for (const round of [0, 1]) {
    if (round === 1) await sleep(Math.max(0, run.faults[0]! + APART_S * 1000 - performance.now()))
    await fault()
    const faultAt = performance.now()
    run.faults.push(faultAt)
    await waitFor('the page', async () => pages(receiver).length > 2 * round, REAL.page * 1000).catch(() => {})
    if (round === 0 && during !== undefined) run.during = await during()
    await sleep(Math.max(faultAt + OUTAGE_S * 1000, (pages(receiver)[2 * round]?.at ?? 0) + 10_000) - performance.now())
    await mend()
    run.recoveries.push(performance.now())
    await waitFor('the resolve', async () => pages(receiver).length > 2 * round + 1, REAL.resolve * 1000).catch(() => {})
  }
  await sleep(REAL_WATCH_S * 1000)
  run.promAfter = await prometheus.alerts()
  run.amAfter = await alertmanager.alerts('?active=true&silenced=false&inhibited=false')
  return run
}

/**
 * The assertions of a repeated outage: each round one page and one resolve on the pager, within
 * their bounds, of the alert `expected` names; no "resolved" of an alert not sent firing; nothing
 * else to any receiver; nothing pending or firing after; every notification printed.
 */
function checkRepeated (t: Test, run: RepeatedRun, expected: (notification: Notification) => boolean, what: string): void {
  for (const notification of run.notifications) t.comment(stamped(notification, run.startedAt))
  run.faults.forEach((at, round) => t.comment(`fault ${round + 1} at +${((at - run.startedAt) / 1000).toFixed(1)} s, recovery at +${(((run.recoveries[round] ?? NaN) - run.startedAt) / 1000).toFixed(1)} s`))
  const paged = run.notifications.filter((notification) => notification.path === '/pager')
  t.same(paged.map((notification) => notification.body.status), ['firing', 'resolved', 'firing', 'resolved'], 'on the pager: a page and its resolve, twice, and nothing else', { notifications: paged.map(describe) })
  for (const round of [0, 1]) {
    const [page, resolve] = [paged[2 * round], paged[2 * round + 1]]
    const faultAt = run.faults[round] ?? NaN
    const recoveredAt = run.recoveries[round] ?? NaN
    const pageAfter = ((page?.at ?? NaN) - faultAt) / 1000
    const resolveAfter = ((resolve?.at ?? NaN) - recoveredAt) / 1000
    t.ok(pageAfter > 0 && pageAfter <= REAL.page, `outage ${round + 1}: paged ${pageAfter.toFixed(1)} s after the fault (bound ${REAL.page} s)`)
    t.ok(page !== undefined && expected(page), `outage ${round + 1}: the page is ${what}`, { alerts: names(page) })
    t.ok(page?.body.alerts.every((alert) => alert.status === 'firing'), `outage ${round + 1}: the page holds no "resolved"`)
    t.ok(resolveAfter > 0 && resolveAfter <= REAL.resolve, `outage ${round + 1}: resolved ${resolveAfter.toFixed(1)} s after recovery (bound ${REAL.resolve} s)`)
    t.same(names(resolve), names(page), `outage ${round + 1}: the resolve names the alerts of the page, and no other`)
  }
  t.ok((paged[1]?.at ?? Infinity) < (run.faults[1] ?? 0), 'the first outage was resolved before the second began: two incidents')
  const sent = new Set<string>()
  for (const notification of paged) {
    for (const alert of notification.body.alerts) {
      if (alert.status === 'firing') sent.add(alertKey(alert.labels))
      else t.ok(sent.has(alertKey(alert.labels)), `resolved ${alert.labels.alertname ?? '?'}: it was sent firing before`)
    }
  }
  t.same(run.notifications.filter((notification) => notification.path !== '/pager').map(describe), [], 'no ticket, nothing to the default receiver')
  t.same(run.promAfter.filter((alert) => alert.labels.alertname !== 'Watchdog').map((alert) => `${alert.labels.alertname ?? '?'} ${alert.state}`), [], `${REAL_WATCH_S} s after the last resolve, nothing pending or firing in Prometheus (but the Watchdog)`)
  t.same(run.amAfter.filter((alert) => alert.labels.alertname !== 'Watchdog').map((alert) => alert.labels.alertname), [], 'nor active in Alertmanager')
}

const skip = skipWithout(['prometheus', 'prometheus-alertmanager'])

t.test('a quiet instance: a sign-in, a read a second of which half hit the cache, an order provisioned: no notification at all, and every panel has data', { skip }, async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...LIMITS, CRM_EVENTS_ENABLED: 'true' }, sandbox)
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected', 20_000)
  const monitoring = await monitor(t, await listen(app))
  const { prometheus, receiver } = monitoring
  // Denser than "a few reads a minute", so that the hit rate is judged (20 reads) within the run, yet
  // far from a read a second over 5 minutes (the rules' volume for a cost).
  const token = await login(app)
  steady(t, 1000, async (tick) => await app.inject({ url: `/api/invoices?page=${tick % 2 === 0 ? 1 : tick}`, headers: bearer(token) }))
  const [crmOrderId] = await seedCrmOrders(sandbox, 1) as [string]
  sandbox.crm.publishOrderProvisionRequested(crmOrderId)
  await waitFor('the order Active', () => allActive(app, [crmOrderId]), 30_000)

  // Past a cost ticket's for (25 s) and group_wait (25 s), once the hit rate is judged.
  await sleep(75_000)
  const hitRate = ((await app.inject({ url: '/health/alerts', headers: bearer(OPS_TOKEN) })).json() as { alerts: Array<{ measure: string, level: string, value: number | null }> })
    .alerts.find((alert) => alert.measure === 'cache_hit_rate')
  t.not(hitRate?.level, 'ok', `/health/alerts judges the cache hit rate ${hitRate?.level ?? '?'} (${hitRate?.value ?? '?'} %): the specification's levels stand`)
  t.same(receiver.notifications.map(describe), [], 'no notification at all: no page, no ticket')

  const exported = (await app.inject({ url: '/metrics', headers: bearer(OPS_TOKEN) })).body
  // Judged in the Redis scenario: the shared Redis may have no maxmemory.
  for (const row of THRESHOLDS.filter((candidate) => candidate.measure !== 'cache_memory')) {
    t.ok((await panelData(prometheus, panelExpr(row))).length > 0, `panel "${row.description}" has data`)
  }
  for (const { title, expr } of SERVICE_PANELS) {
    const metric = /portal_bff_[a-z_]+/.exec(expr)?.[0] ?? ''
    t.ok(exported.includes(metric), `${metric} is exported`)
    t.ok((await panelData(prometheus, expr)).length > 0, `panel "${title}" has data`)
  }
})

/** The real-time scenarios: started with the file, beside the others, and asserted last. */
function realTime (scenario: (t: Test) => Promise<RepeatedRun>): Promise<RepeatedRun | Error> {
  if (skip !== false) return Promise.resolve(new Error('skipped'))
  return scenario(t).catch((error: unknown) => error instanceof Error ? error : new Error(String(error)))
}

const redisRepeated = realTime(async (t) => {
  const sandbox = await startTestSandbox(t)
  const { app, redis } = await buildTestAppOnPrivateRedis(t, LIMITS, sandbox)
  // A limit, so that the cache memory panel has a value.
  await redis.client(t).config('SET', 'maxmemory', String(256 * 1024 * 1024))
  const monitoring = await monitor(t, await listen(app), 1)
  const token = await login(app)
  steady(t, 500, async () => await app.inject({ url: '/api/invoices', headers: bearer(token) }))
  await sleep(20_000)
  const memory = THRESHOLDS.find((row) => row.measure === 'cache_memory')!
  const memoryPanel = (await panelData(monitoring.prometheus, panelExpr(memory))).length > 0
  const run = await repeatedOutage(monitoring, { fault: () => redis.kill(), mend: () => redis.start() })
  return { ...run, during: { memoryPanel } }
})

const billingRepeated = realTime(async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, LIMITS, sandbox)
  const monitoring = await monitor(t, await listen(app), 1)
  // Sign-ins, each a billing call that no cache answers: 4 a second.
  steady(t, 250, async () => await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'correct-horse' } }))
  await sleep(20_000)
  return await repeatedOutage(monitoring, {
    fault: async () => sandbox.billing.injectFault({ kind: 'http5xx', status: 500 }),
    mend: async () => sandbox.billing.clearFaults(),
    during: async () => ({ firing: await panelData(monitoring.prometheus, FIRING_ALERTS_EXPR) })
  })
})

t.test('events disabled: an order awaiting approval past the critical age pages nobody; one the CRM approved that waits pages P2, once, and resolves once provisioned', { skip }, async (t) => {
  const sandbox = await startTestSandbox(t)
  // Ages in seconds, as settings: the rules read them from the exported gauges. The reconciliation
  // asks the CRM every second.
  const ages = { ORDERS_PENDING_WARNING_S: '2', ORDERS_PENDING_CRITICAL_S: '4', ORDERS_RECONCILE_INTERVAL_S: '1' }
  const app = await buildTestApp(t, { ...LIMITS, ...ages, CRM_EVENTS_ENABLED: 'false' }, sandbox)
  const monitoring = await monitor(t, await listen(app))
  const token = await login(app)
  const [awaiting, approved] = [await placeOrder(app, token), await placeOrder(app, token)]
  await app.pg.query('UPDATE orders SET created_at = now() - interval \'2 hours\' WHERE id = $1', [awaiting.id])

  // The CRM's people take their time: past a page's bound, nothing.
  await sleep(SCALED.page * 1000)
  const exported = await monitoring.prometheus.query('portal_bff_orders_awaiting_approval_oldest_age_seconds')
  t.ok(exported.some((sample) => Number(sample.value[1]) > 7200), 'Prometheus holds an order awaiting approval for over two hours', { exported })
  t.same(monitoring.receiver.notifications.map(describe), [], 'an order awaiting approval far past the critical age: no notification')

  // The CRM approves the other; its job queued while the queue is paused: it waits here.
  const queue = new Queue(PROVISIONING_QUEUE, { connection: { host: new URL(SHARED_REDIS).hostname, port: Number(new URL(SHARED_REDIS).port) }, prefix: jobQueuePrefix(app.config.REDIS_KEY_PREFIX) })
  t.teardown(() => queue.close())
  const page = await outage(t, monitoring, {
    fault: async () => {
      await queue.pause()
      sandbox.crm.updateOrder(approved.crmOrderId, { Status: 'Approved' })
    },
    mend: async () => await queue.resume(),
    during: async () => {
      t.match((await app.inject({ url: `/api/orders/${approved.id}`, headers: bearer(token) })).json(), { status: 'Pending Review' }, 'the approved order waits in Pending Review')
      t.match((await app.inject('/health/queues')).json().orders, { awaitingApproval: { count: 1 }, approvedNotReceived: { count: 1 } }, 'counted apart')
    }
  })
  t.ok(page.body.alerts.some((alert) => alert.labels.alertname === 'PortalBffOrdersPendingAge' && alert.labels.priority === 'P2'), 'a P2 page: an order the CRM approved waits', { alerts: names(page) })
  t.ok(await allActive(app, [approved.crmOrderId]), 'provisioned once the queue runs')
  t.match((await app.inject({ url: `/api/orders/${awaiting.id}`, headers: bearer(token) })).json(), { status: 'Pending Review' }, 'the other still awaits approval')
})

t.test('no instance answers: the dashboard\'s firing alerts list PortalBffNoInstanceUp, which has no instance label', { skip }, async (t) => {
  const { prometheus } = await monitor(t, `127.0.0.1:${await freePort()}`)
  let firing: Array<{ metric: Record<string, string> }> = []
  await waitFor('PortalBffNoInstanceUp firing', async () => {
    firing = await panelData(prometheus, FIRING_ALERTS_EXPR)
    return firing.some((alert) => alert.metric.alertname === 'PortalBffNoInstanceUp')
  }, (SCALED.pageFor + MARGIN_S + 10) * 1000).catch(() => {})
  const alert = firing.find((candidate) => candidate.metric.alertname === 'PortalBffNoInstanceUp')
  t.ok(alert, 'listed', { firing })
  t.notOk(alert !== undefined && 'instance' in alert.metric, 'with no instance label')
})

t.test('Redis down 2 minutes, and again 5 minutes later, on the shipped files in real time: each time one P1 page, core status alone, and one resolve; nothing after', { skip }, async (t) => {
  const run = await redisRepeated
  if (run instanceof Error) throw run
  t.ok(run.during.memoryPanel, 'panel of the cache memory has data')
  checkRepeated(t, run, (page) => names(page).join() === 'PortalBffCoreStatus critical' && page.body.alerts[0]?.labels.priority === 'P1', 'core status, P1, alone (its 5xx and latency held back)')
})

t.test('billing down 2 minutes, and again 5 minutes later, on the shipped files in real time: each time one page naming billing, and one resolve; nothing after', { skip }, async (t) => {
  const run = await billingRepeated
  if (run instanceof Error) throw run
  const firing = run.during.firing as Array<{ metric: Record<string, string> }>
  t.ok(firing.some((alert) => alert.metric.dependency === 'billing'), 'the dashboard\'s firing alerts list the billing alert', { firing })
  checkRepeated(t, run, (page) => names(page).join() === 'PortalBffBillingFailedRequests critical' && page.body.alerts[0]?.labels.dependency === 'billing', 'billing failing, alone (the 5xx it causes held back)')
  t.same(run.notifications.find((notification) => notification.path === '/pager')?.body.groupLabels, { job: 'portal-bff' }, 'one notification for the service')
})

import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { Queue } from 'bullmq'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { FIRING_ALERTS_EXPR, RECENT_WINDOW, RULES_FILE, SERVICE_PANELS, panelExpr } from '../../dev/scripts/alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { THRESHOLDS } from '../../plugins/app/monitoring/thresholds.js'
import { PROVISIONING_QUEUE } from '../../plugins/app/orders/provisioning-job.js'
import { jobQueuePrefix } from '../../plugins/app/redis-keys.js'
import { buildTestApp, startTestSandbox } from '../helpers/app.js'
import { AlertmanagerServer, operatorAlertmanagerConfig, receiversAt, PrometheusServer, WebhookReceiver, type Notification } from '../helpers/monitoring-servers.js'
import { SHARED_REDIS } from '../helpers/made.js'
import { skipWithout } from '../helpers/packages.js'
import { freePort } from '../helpers/ports.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'
import { allActive, eventsReport, placeOrder, seedCrmOrders, STREAMING } from '../helpers/provisioning.js'
import { bearer, login } from '../helpers/tokens.js'

// The shipped monitoring run for real: Debian's Prometheus and Alertmanager on the files of
// deploy/monitoring, scraping a running instance, notifying a webhook receiver of the test's. Each
// scenario is a run of its own. What differs from the shipped files, and nothing else:
// - addresses: the scrape target is the test's instance (127.0.0.1:3000 shipped), Prometheus sends
//   to the test's Alertmanager (127.0.0.1:9093), the receivers are set to the test's webhook receiver
//   as docs/operations.md says, and the operations token file holds the test's token;
// - durations, twelve times shorter: every rule's `for:` (a page's 1m is 5 s here, a ticket's 5m and
//   10m are 25 s and 50 s), the rules' last-minute window (1m: 5 s), Alertmanager's group_wait and
//   group_interval (a page's 67.5 s and 1m: 5.625 s and 5 s), scrape and evaluation (15 s: 1.25 s);
//   a scrape timeout of 1 s (5 s). The measures' 5-minute windows and the repeat intervals stay.
const SCALE = 12
const INTERVAL_S = 15 / SCALE
// A loaded machine: a scrape that waits, an evaluation late, the test's own polling.
const MARGIN_S = 10

/** Seconds of a Prometheus duration: `1m`, `67s500ms`. */
function seconds (duration: string): number {
  const parts = [...duration.matchAll(/(\d+)(ms|s|m|h)/g)]
  if (parts.length === 0 || parts.map(([part]) => part).join('') !== duration) throw new Error(`not a duration: ${duration}`)
  return parts.reduce((sum, [, value, unit]) => sum + Number(value) * { ms: 0.001, s: 1, m: 60, h: 3600 }[unit as 'ms' | 's' | 'm' | 'h'], 0)
}
const shorter = (duration: string) => `${Math.round(seconds(duration) * 1000 / SCALE)}ms`

const PAGE_FOR_S = seconds('1m') / SCALE
const PAGE_GROUP_WAIT_S = 67.5 / SCALE
const PAGE_GROUP_INTERVAL_S = seconds('1m') / SCALE
const RECENT_S = seconds(RECENT_WINDOW) / SCALE
/**
 * A page reaches the pager this long after its fault, at most: the traffic crosses the thresholds
 * (the scenarios' traffic does within a few seconds), `for:`, a scrape and an evaluation, the page
 * route's group_wait. The shipped bound: 1.5 minutes after the condition, and the minute of group_wait.
 */
const PAGE_BOUND_S = 5 + PAGE_FOR_S + 2 * INTERVAL_S + PAGE_GROUP_WAIT_S + MARGIN_S
/**
 * Its "resolved" this long after recovery, at most: the rules' last-minute window, a scrape and an
 * evaluation, the page route's group_interval (decision 0058: within 3 minutes as shipped).
 */
const RESOLVE_BOUND_S = RECENT_S + 2 * INTERVAL_S + PAGE_GROUP_INTERVAL_S + MARGIN_S
/** After the resolve, nothing more arrives for this long: past a ticket's `for:` and group_wait. */
const WATCH_S = 25

const OPS_TOKEN = 'an-operations-token-of-the-test'
const LIMITS = { RATE_LIMIT_MAX: '100000', LOGIN_RATE_LIMIT_MAX: '100000', LOGIN_ACCOUNT_FAILURES_MAX: '100000', OPS_TOKEN }

t.setTimeout(10 * 60_000)

function shippedRules (): string {
  const text = readFileSync(join(projectRoot, RULES_FILE), 'utf8')
  const recent = `[${RECENT_WINDOW}]`
  if (!text.includes(recent)) throw new Error(`the rules no longer use ${recent}`)
  return text.replace(/^( {8}for: )(\S+)$/gm, (_, key: string, duration: string) => `${key}${shorter(duration)}`).replaceAll(recent, `[${shorter(RECENT_WINDOW)}]`)
}

function shippedAlertmanager (receiver: string): string {
  return operatorAlertmanagerConfig(receiversAt(receiver))
    .replace(/^( +(?:group_wait|group_interval): )(\S+)$/gm, (_, key: string, duration: string) => `${key}${shorter(duration)}`)
}

function shippedPrometheus (target: string, alertmanager: string): string {
  const text = readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/prometheus.yml'), 'utf8')
  const changed = text.replace("targets: ['127.0.0.1:3000']", `targets: ['${target}']`).replace("targets: ['127.0.0.1:9093']", `targets: ['${alertmanager}']`)
    .replace(/^( +(?:scrape_interval|evaluation_interval): )15s$/gm, `$1${INTERVAL_S * 1000}ms`).replace(/^( +scrape_timeout: )5s$/m, '$11s')
  if (changed.split('\n').filter((line, index) => line !== text.split('\n')[index]).length !== 5) throw new Error('prometheus.yml no longer has the shipped addresses and intervals')
  return changed
}

interface Monitoring { prometheus: PrometheusServer, receiver: WebhookReceiver }

/** Prometheus, Alertmanager and a webhook receiver on the shipped files, watching `target`; ended with the test. */
async function monitor (t: Test, target: string): Promise<Monitoring> {
  const receiver = await WebhookReceiver.start()
  t.teardown(() => receiver.stop())
  const alertmanager = await AlertmanagerServer.start({ config: shippedAlertmanager(receiver.address) })
  t.teardown(() => alertmanager.stop())
  const prometheus = await PrometheusServer.withFiles({
    'prometheus.yml': shippedPrometheus(target, alertmanager.address),
    'alerts.yml': shippedRules(),
    'portal-bff-ops-token': OPS_TOKEN
  })
  t.teardown(() => prometheus.stop())
  return { prometheus, receiver }
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
const describe = (notification: Notification) => `${notification.path} ${notification.body.status}: ${notification.body.alerts.map((alert) => `${alert.labels.alertname ?? '?'} ${alert.labels.severity ?? '?'} ${alert.status}`).join(', ')}`
const names = (notification: Notification | undefined) => (notification?.body.alerts ?? []).map((alert) => `${alert.labels.alertname ?? '?'} ${alert.labels.severity ?? '?'}`).sort()

/** A dashboard panel's query as Grafana sends it with every instance chosen. */
async function panelData (prometheus: PrometheusServer, expr: string) {
  return await prometheus.query(expr.replaceAll('$instance', '.+'))
}

/**
 * An outage and its recovery, watched: the one page within its bound, the one "resolved" within
 * its bound, nothing else at all. `during` runs while the page is open.
 */
async function outage (t: Test, { receiver }: Monitoring, { fault, mend, during }: { fault: () => Promise<unknown>, mend: () => Promise<unknown>, during?: () => Promise<void> }): Promise<Notification> {
  await fault()
  const faultAt = performance.now()
  await waitFor('the page', async () => pages(receiver).length > 0, PAGE_BOUND_S * 1000).catch(() => {})
  const page = pages(receiver)[0]
  t.ok(page !== undefined, `paged ${page === undefined ? 'never' : `${((page.at - faultAt) / 1000).toFixed(1)} s`} after the fault (bound ${PAGE_BOUND_S} s)`)
  await during?.()
  // The outage goes on a while: nothing more is sent for it.
  await sleep(2 * PAGE_GROUP_INTERVAL_S * 1000)
  t.equal(pages(receiver).length, 1, 'one page while the outage goes on', { notifications: receiver.notifications.map(describe) })

  await mend()
  const recoveredAt = performance.now()
  await waitFor('the resolve', async () => pages(receiver).length > 1, RESOLVE_BOUND_S * 1000).catch(() => {})
  const resolved = pages(receiver)[1]
  t.ok(resolved !== undefined, `resolved ${resolved === undefined ? 'never' : `${((resolved.at - recoveredAt) / 1000).toFixed(1)} s`} after recovery (bound ${RESOLVE_BOUND_S} s)`)
  t.equal(resolved?.body.status, 'resolved', 'the notification after recovery is the resolve')
  t.ok(resolved?.body.alerts.every((alert) => alert.status === 'resolved'), 'every alert resolved at once')
  t.ok(names(page).every((name) => names(resolved).includes(name)), 'the alerts of the page among them (with those the page held back)', { page: names(page), resolved: names(resolved) })
  await sleep(WATCH_S * 1000)
  t.equal(pages(receiver).length, 2, `nothing paged in the ${WATCH_S} s after the resolve, although the 5-minute windows still hold the outage`, { notifications: receiver.notifications.map(describe) })
  t.same(others(receiver).map(describe), [], 'no ticket, nothing to the default receiver')
  return page!
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

t.test('billing down: one page, naming billing, with the 5xx it causes; after recovery nothing but its resolve', { skip }, async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, LIMITS, sandbox)
  const monitoring = await monitor(t, await listen(app))
  // Sign-ins, each a billing call that no cache answers: 8 a second, so that the failed billing
  // requests (21) and the 5xx rate cross within a page's group_wait of each other.
  steady(t, 125, async () => await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'correct-horse' } }))
  await sleep(10_000)

  const page = await outage(t, monitoring, {
    fault: async () => sandbox.billing.injectFault({ kind: 'http5xx', status: 500 }),
    mend: async () => sandbox.billing.clearFaults(),
    during: async () => {
      const firing = await panelData(monitoring.prometheus, FIRING_ALERTS_EXPR)
      t.ok(firing.some((alert) => alert.metric.dependency === 'billing'), 'the dashboard\'s firing alerts list the billing alert')
    }
  })
  t.equal(page.body.status, 'firing')
  t.ok(page.body.alerts.some((alert) => alert.labels.dependency === 'billing' && alert.labels.severity === 'critical'), 'the page names billing', { alerts: names(page) })
  t.ok(page.body.alerts.some((alert) => alert.labels.alertname === 'PortalBffHttp5xxRate'), 'with the 5xx it causes inside', { alerts: names(page) })
  t.same(page.body.groupLabels, { job: 'portal-bff' }, 'one notification for the service')
})

t.test('Redis down: one P1 page; after recovery nothing but its resolve', { skip }, async (t) => {
  const sandbox = await startTestSandbox(t)
  const { app, redis } = await buildTestAppOnPrivateRedis(t, LIMITS, sandbox)
  // A limit, so that the cache memory panel has a value.
  await redis.client(t).config('SET', 'maxmemory', String(256 * 1024 * 1024))
  const monitoring = await monitor(t, await listen(app))
  const token = await login(app)
  steady(t, 500, async () => await app.inject({ url: '/api/invoices', headers: bearer(token) }))
  await sleep(10_000)
  const memory = THRESHOLDS.find((row) => row.measure === 'cache_memory')!
  t.ok((await panelData(monitoring.prometheus, panelExpr(memory))).length > 0, `panel "${memory.description}" has data`)

  const page = await outage(t, monitoring, { fault: () => redis.kill(), mend: () => redis.start() })
  t.ok(page.body.alerts.some((alert) => alert.labels.alertname === 'PortalBffCoreStatus' && alert.labels.priority === 'P1'), 'a P1 page: core status', { alerts: names(page) })
  t.ok(page.body.alerts.every((alert) => ['P1', 'P2'].includes(alert.labels.priority ?? '')), 'only pages in it')
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
  await sleep(PAGE_BOUND_S * 1000)
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
  }, (PAGE_FOR_S + MARGIN_S + 10) * 1000).catch(() => {})
  const alert = firing.find((candidate) => candidate.metric.alertname === 'PortalBffNoInstanceUp')
  t.ok(alert, 'listed', { firing })
  t.notOk(alert !== undefined && 'instance' in alert.metric, 'with no instance label')
})

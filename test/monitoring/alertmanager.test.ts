import t from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { alertName, allRules, rulePriority, TARGET_LABELS } from '../../dev/scripts/alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { threshold, type MeasureName } from '../../plugins/app/monitoring/thresholds.js'
import { INCIDENT_PRIORITIES, type Priority } from '../../plugins/app/monitoring/threshold-row.js'
import { AlertmanagerServer, operatorAlertmanagerConfig, type AlertmanagerAlert, type ReceiverUrls } from '../helpers/monitoring-servers.js'
import { findProgram, skipWithout } from '../helpers/packages.js'

const SHIPPED = 'deploy/monitoring/alertmanager/alertmanager.yml'
/** What an operator gives before the first start (docs/operations.md). */
const OPERATOR_URLS: ReceiverUrls = {
  PAGER_URL: 'https://events.pagerduty.test/integration/abc/enqueue',
  TICKETS_URL: 'https://tracker.test/hooks/alerts',
  DEFAULT_URL: 'https://tracker.test/hooks/other',
  WATCHDOG_URL: 'https://hc-ping.test/0b1c2d3e'
}
let configFile: string | undefined
/** The shipped configuration with the receivers set as docs/operations.md says: what amtool routes on. Written on first use. */
function operatorConfig (): string {
  if (configFile !== undefined) return configFile
  const directory = mkdtempSync(join(tmpdir(), 'portal-bff-alertmanager-'))
  t.teardown(() => rmSync(directory, { recursive: true, force: true }))
  configFile = join(directory, 'alertmanager.yml')
  writeFileSync(configFile, operatorAlertmanagerConfig(OPERATOR_URLS))
  return configFile
}

const amtool = findProgram('amtool')

function runAmtool (args: string[]): { code: number | null, output: string, stdout: string } {
  if (amtool === undefined) throw new Error('amtool is not installed')
  const result = spawnSync(amtool, args, { cwd: projectRoot, encoding: 'utf8', timeout: 30_000 })
  return { code: result.status, output: `${result.stdout}${result.stderr}`, stdout: result.stdout }
}

function routeOf (labels: Record<string, string>): string {
  const result = runAmtool(['config', 'routes', 'test', `--config.file=${operatorConfig()}`, ...Object.entries(labels).map(([label, value]) => `${label}=${value}`)])
  if (result.code !== 0) throw new Error(`amtool config routes test failed: ${result.output}`)
  return result.stdout.trim()
}

const PAGED: Record<Priority, string> = { P1: 'pager', P2: 'pager', P3: 'tickets', P4: 'tickets' }

/** Alertmanager's duration of a number of minutes, as the configuration writes it. */
function interval (minutes: number): string {
  return minutes % 60 === 0 ? `${minutes / 60}h` : `${minutes}m`
}

t.test('amtool: the shipped configuration is refused until the receivers are set; set as documented, it is valid and routes on the priority label', { skip: skipWithout(['amtool']) }, async (t) => {
  const shipped = runAmtool(['check-config', SHIPPED])
  t.not(shipped.code, 0, 'as shipped, amtool check-config fails: no receiver is set')
  t.match(shipped.output, 'unsupported scheme "unset-', 'naming the unset receiver URL')
  const check = runAmtool(['check-config', operatorConfig()])
  t.equal(check.code, 0, 'with the receivers set as docs/operations.md says, amtool check-config passes', { output: check.output })
  t.match(check.output, /SUCCESS/)
  t.match(check.output, '6 inhibit rules')
  t.match(check.output, '4 receivers')
  const config = readFileSync(operatorConfig(), 'utf8')
  for (const url of Object.values(OPERATOR_URLS)) t.match(config, `- url: '${url}'`, `${url} set`)
  t.notMatch(config, /url: 'unset-/, 'every receiver set')

  t.equal(routeOf({ alertname: 'Watchdog', severity: 'none', measure: 'watchdog' }), 'watchdog', 'the Watchdog goes to its own receiver')

  t.equal(routeOf({ alertname: 'PortalBffCoreStatus', severity: 'critical', priority: 'P1' }), 'pager', 'P1 pages')
  t.equal(routeOf({ alertname: 'PortalBffJobQueueWaiting', severity: 'critical', priority: 'P2' }), 'pager', 'P2 pages')
  t.equal(routeOf({ alertname: 'PortalBffCoreStatus', severity: 'warning', priority: 'P3' }), 'tickets', 'P3 is a ticket')
  t.equal(routeOf({ alertname: 'PortalBffJobQueueWaiting', severity: 'warning', priority: 'P4' }), 'tickets', 'P4 is a ticket')
  t.equal(routeOf({ alertname: 'SomethingElse', severity: 'critical' }), 'default', 'an alert with no priority goes to the default receiver')
  t.equal(routeOf({ alertname: 'SomethingElse', priority: 'P9' }), 'default', 'an unknown priority too')

  // Every shipped rule, the table's at both levels and the service's own, reaches the receiver of its priority.
  for (const rule of allRules()) {
    const labels = { alertname: rule.alert, ...rule.labels, ...TARGET_LABELS }
    const verify = runAmtool(['config', 'routes', 'test', `--config.file=${operatorConfig()}`, `--verify.receivers=${PAGED[rule.priority]}`, ...Object.entries(labels).map(([label, value]) => `${label}=${value}`)])
    t.equal(verify.code, 0, `${rule.alert} ${rule.labels.severity ?? '?'} (${rule.priority}) goes to ${PAGED[rule.priority]}`, { output: verify.output })
  }
})

/** A route of the configuration: the lines that follow its matcher, up to the next route. */
function routeBlock (config: string, matcher: string): string {
  const start = config.indexOf(`- matchers: ['${matcher}']`)
  const end = config.indexOf('\n    - ', start + 1)
  return start < 0 ? '' : config.slice(start, end < 0 ? undefined : end)
}

t.test('pages are one notification per service, flushed every minute (a resolve, or an incident soon after another, waits at most that); tickets one per alert, repeated at their response time', async (t) => {
  const config = readFileSync(join(projectRoot, SHIPPED), 'utf8')
  const pager = routeBlock(config, 'priority=~"P1|P2"')
  t.match(pager, /receiver: pager\n\s+group_by: \[job\]\n(?:\s+#.*\n)*\s+group_wait: 30s\n(?:\s+#.*\n)*\s+group_interval: 1m\n(?:\s+#.*\n)*\s+repeat_interval: 1h\b/, 'P1 and P2 together, grouped by the service; no phase between evaluations is relied on (decision 0105)')
  for (const priority of ['P3', 'P4'] as const) {
    const { respondWithinMinutes } = INCIDENT_PRIORITIES[priority]
    t.match(routeBlock(config, `priority="${priority}"`), new RegExp(`receiver: tickets\\n\\s+group_by: \\[job, alertname\\]\\n(?:.*\\n){2}\\s+repeat_interval: ${interval(respondWithinMinutes)}\\b`), `${priority} → tickets, repeated every ${interval(respondWithinMinutes)}`)
  }
  const urls = [...config.matchAll(/- url: '(\S+)'/g)].map(([, url]) => url!)
  t.same(urls.map((url) => url.split(':')[0]), ['unset-pager', 'unset-tickets', 'unset-default', 'unset-watchdog'], 'four receivers, none set: no placeholder address that would lose the pages')
  t.notMatch(config, /https?:\/\//i, 'no invented host')
  t.match(routeBlock(config, 'alertname="Watchdog"'), /receiver: watchdog\n\s+group_by: \[alertname\]\n\s+group_wait: 0s\n\s+group_interval: 1m\n\s+repeat_interval: 1m\b/, 'the Watchdog alone, at once, every minute')
  t.match(readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/prometheus.yml'), 'utf8'), /^alerting:\n {2}alertmanagers:\n {4}- static_configs:\n {8}- targets: \['127\.0\.0\.1:9093'\]/m, 'Prometheus sends its alerts to Alertmanager')
})

/** The labels a rule of the table fires with, on an instance. */
function ruleAlert (measure: MeasureName, level: 'warning' | 'critical', instance: string): Record<string, string> {
  const row = threshold(measure)
  return { alertname: alertName(row), severity: level, measure, priority: rulePriority(row, level), ...(row.dependency !== undefined && { dependency: row.dependency }), job: TARGET_LABELS.job, instance }
}

/** Alerts firing since a minute ago, for the next hour, as Prometheus would send them. */
async function post (server: AlertmanagerServer, alerts: Array<Record<string, string>>): Promise<Response> {
  const startsAt = new Date(Date.now() - 60_000).toISOString()
  const endsAt = new Date(Date.now() + 3_600_000).toISOString()
  return await fetch(`${server.url}/api/v2/alerts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(alerts.map((labels) => ({ labels, annotations: { summary: 'test' }, startsAt, endsAt })))
  })
}

t.test('a real Alertmanager inhibits as the configuration says', { skip: skipWithout(['prometheus-alertmanager']) }, async (t) => {
  const server = await AlertmanagerServer.start()
  t.teardown(() => server.stop())

  const alerts = {
    critical: ruleAlert('http_5xx_rate', 'critical', 'bff-a:3000'),
    warningTwin: ruleAlert('http_5xx_rate', 'warning', 'bff-a:3000'),
    otherWarning: ruleAlert('billing_queue_size', 'warning', 'bff-a:3000'),
    coreDown: ruleAlert('core_status', 'critical', 'bff-b:3000'),
    latency: ruleAlert('api_response_time_p95', 'warning', 'bff-b:3000'),
    pool: ruleAlert('database_pool_usage', 'critical', 'bff-b:3000'),
    queueWithCoreDown: ruleAlert('job_queue_waiting', 'warning', 'bff-b:3000'),
    latencyElsewhere: ruleAlert('api_response_time_p95', 'warning', 'bff-c:3000'),
    instanceDown: { alertname: 'PortalBffInstanceDown', severity: 'critical', priority: 'P1', job: TARGET_LABELS.job, instance: 'bff-d:3000' },
    onDownInstance: ruleAlert('job_queue_failed', 'critical', 'bff-d:3000'),
    warningOnDownInstance: ruleAlert('crm_daily_usage', 'warning', 'bff-d:3000'),
    billingDown: ruleAlert('billing_failed_requests', 'critical', 'bff-e:3000'),
    hitRateWithBillingDown: ruleAlert('cache_hit_rate', 'critical', 'bff-e:3000'),
    hitRateElsewhere: ruleAlert('cache_hit_rate', 'critical', 'bff-c:3000'),
    noInstanceUp: { alertname: 'PortalBffNoInstanceUp', severity: 'critical', priority: 'P1', measure: 'no_instance_up', job: 'portal-bff-other' },
    instanceDownOfThatJob: { alertname: 'PortalBffInstanceDown', severity: 'critical', priority: 'P1', measure: 'instance_down', job: 'portal-bff-other', instance: 'bff-f:3000' },
    subscriptionOfThatJob: { alertname: 'PortalBffEventSubscriptionNotConnected', severity: 'critical', priority: 'P2', measure: 'event_subscription_not_connected', job: 'portal-bff-other' },
    fiveHundredsWithCoreDown: ruleAlert('http_5xx_rate', 'critical', 'bff-b:3000'),
    externalWithBillingDown: ruleAlert('external_error_rate', 'critical', 'bff-e:3000'),
    fiveHundredsWithBillingDown: ruleAlert('http_5xx_rate', 'critical', 'bff-e:3000'),
    watchdog: { alertname: 'Watchdog', severity: 'none', measure: 'watchdog' }
  }
  const posted = await post(server, Object.values(alerts))
  t.equal(posted.status, 200, 'the alerts are taken', { body: await posted.text() })

  const key = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).sort())
  const expectedInhibitor: Record<keyof typeof alerts, keyof typeof alerts | null> = {
    critical: null,
    warningTwin: 'critical',
    otherWarning: null,
    coreDown: null,
    latency: 'coreDown',
    pool: 'coreDown',
    queueWithCoreDown: 'coreDown',
    latencyElsewhere: null,
    instanceDown: null,
    onDownInstance: 'instanceDown',
    warningOnDownInstance: 'instanceDown',
    billingDown: null,
    hitRateWithBillingDown: 'billingDown',
    hitRateElsewhere: null,
    noInstanceUp: null,
    instanceDownOfThatJob: 'noInstanceUp',
    subscriptionOfThatJob: 'noInstanceUp',
    // The rules hold the 5xx page back while core status or billing fails (decision 0105): an
    // inhibition would send its resolve once its source resolved.
    fiveHundredsWithCoreDown: null,
    externalWithBillingDown: 'billingDown',
    fiveHundredsWithBillingDown: null,
    // Nothing silences the dead man's switch, not even no instance up.
    watchdog: null
  }
  // The inhibitor takes the alerts in asynchronously: poll until every alert is there and settled.
  let byKey = new Map<string, AlertmanagerAlert>()
  const settled = () => Object.entries(expectedInhibitor).every(([name, inhibitor]) => {
    const alert = byKey.get(key(alerts[name as keyof typeof alerts]))
    return alert !== undefined && (inhibitor === null ? alert.status.inhibitedBy.length === 0 : alert.status.inhibitedBy.length > 0)
  })
  for (let attempt = 0; attempt < 50; attempt++) {
    const listed = await server.alerts()
    byKey = new Map(listed.map((alert) => [key(alert.labels), alert]))
    if (settled()) break
    await sleep(100)
  }
  t.equal(byKey.size, Object.keys(alerts).length, 'every alert is listed')

  for (const [name, inhibitor] of Object.entries(expectedInhibitor) as Array<[keyof typeof alerts, keyof typeof alerts | null]>) {
    const alert = byKey.get(key(alerts[name]))
    const labels: Record<string, string> = alerts[name]
    const what = `${labels.alertname ?? '?'} ${labels.severity ?? '?'} on ${labels.instance ?? labels.job ?? '?'}`
    if (inhibitor === null) {
      t.same(alert?.status.inhibitedBy, [], `${what} is not inhibited`)
      t.equal(alert?.status.state, 'active', `${what} is active`)
    } else {
      const source = byKey.get(key(alerts[inhibitor]))
      t.same(alert?.status.inhibitedBy, [source?.fingerprint], `${what} is inhibited by ${alerts[inhibitor].alertname} ${alerts[inhibitor].severity}`)
      t.equal(alert?.status.state, 'suppressed', `${what} is suppressed`)
    }
  }

  const inhibited = await server.alerts('?active=false&inhibited=true&silenced=false&unprocessed=false')
  t.same(
    inhibited.map((alert) => key(alert.labels)).sort(),
    Object.entries(expectedInhibitor).filter(([, inhibitor]) => inhibitor !== null).map(([name]) => key(alerts[name as keyof typeof alerts])).sort(),
    'GET /api/v2/alerts?inhibited=true lists exactly the inhibited alerts'
  )
})

t.test('a real Alertmanager groups the pages that start together into one notification per service', { skip: skipWithout(['prometheus-alertmanager']) }, async (t) => {
  const server = await AlertmanagerServer.start()
  t.teardown(() => server.stop())
  const alerts = {
    billingDown: ruleAlert('billing_failed_requests', 'critical', 'bff-a:3000'),
    coreDown: ruleAlert('core_status', 'critical', 'bff-c:3000'),
    externalErrors: ruleAlert('external_error_rate', 'critical', 'bff-a:3000'),
    billingWarning: ruleAlert('billing_failed_requests', 'warning', 'bff-a:3000'),
    hitRate: ruleAlert('cache_hit_rate', 'critical', 'bff-b:3000')
  }
  t.equal((await post(server, Object.values(alerts))).status, 200, 'the alerts are taken')
  interface Group { labels: Record<string, string>, receiver: { name: string }, alerts: AlertmanagerAlert[] }
  let groups: Group[] = []
  for (let attempt = 0; attempt < 50; attempt++) {
    groups = await (await fetch(`${server.url}/api/v2/alerts/groups`)).json() as Group[]
    if (groups.reduce((count, group) => count + group.alerts.length, 0) === Object.keys(alerts).length) break
    await sleep(100)
  }
  const pages = groups.filter((group) => group.receiver.name === 'pager')
  t.same(pages.map((group) => group.labels), [{ job: 'portal-bff' }], 'one page group: the service')
  const active = (group: Group | undefined) => (group?.alerts ?? []).filter((alert) => alert.status.state === 'active').map((alert) => `${alert.labels.alertname ?? '?'} ${alert.labels.severity ?? '?'}`).sort()
  t.same(active(pages[0]), ['PortalBffBillingFailedRequests critical', 'PortalBffCoreStatus critical'], 'billing failing on one instance, core status on another: one notification')
  t.ok(pages[0]?.alerts.some((alert) => alert.labels.dependency === 'billing'), 'which names billing')
  const tickets = groups.filter((group) => group.receiver.name === 'tickets')
  t.same(tickets.flatMap((group) => active(group)), ['PortalBffCacheHitRate critical'], 'tickets: only the cache hit rate elsewhere; the external errors and the warning are held back by billing')
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { RULES_FILE } from '../../dev/scripts/alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { AlertmanagerServer, PrometheusServer, WebhookReceiver, operatorAlertmanagerConfig, receiversAt, rulesWithShorterDurations, type Notification } from '../helpers/monitoring-servers.js'
import { skipWithout } from '../helpers/packages.js'
import { placementTestApp } from '../helpers/placement.js'
import { waitFor } from '../helpers/processes.js'
import { placeOrder } from '../helpers/provisioning.js'
import { bearer } from '../helpers/tokens.js'

// Contract §10a with a real Prometheus and Alertmanager on the shipped rules and routes: the CRM
// refuses the reconciliation's status query while an order it approved waits, and the pager is
// told once. Durations twelve times shorter than shipped, as in alerting-scenarios.slow.test.ts:
// the rules' `for:` (a page's 1m: 5 s) and the page route's group_wait and group_interval (30 s
// and 1m: 2.5 s and 5 s); scrape and evaluation every second. A round every 2 s: the third failed
// one pages, and the CRM answers again long before the twelfth, the critical level's.
const SCALE = 12
const ALERT = 'PortalBffReconciliationCrmFailedRounds'

function seconds (duration: string): number {
  return [...duration.matchAll(/(\d+)(ms|s|m|h)/g)].reduce((sum, [, value, unit]) => sum + Number(value) * { ms: 0.001, s: 1, m: 60, h: 3600 }[unit as 'ms' | 's' | 'm' | 'h'], 0)
}
const shorter = (duration: string) => `${Math.round(seconds(duration) * 1000 / SCALE)}ms`

t.setTimeout(240_000)

t.test('the CRM answers 500 to the status query while an approved order waits: one page, resolved once the CRM answers and the order is provisioned', { skip: skipWithout(['prometheus', 'prometheus-alertmanager']) }, async (t) => {
  const { app, sandbox, token } = await placementTestApp(t, { CRM_EVENTS_ENABLED: 'false', ORDERS_RECONCILE_INTERVAL_S: '2' })
  const address = new URL(await app.listen({ port: 0, host: '127.0.0.1' })).host

  const receiver = await WebhookReceiver.start()
  t.teardown(() => receiver.stop())
  const config = operatorAlertmanagerConfig(receiversAt(receiver.address))
    .replace(/^( +(?:group_wait|group_interval): )(\S+)$/gm, (_, key: string, duration: string) => `${key}${shorter(duration)}`)
  const alertmanager = await AlertmanagerServer.start({ config })
  t.teardown(() => alertmanager.stop())
  const rules = rulesWithShorterDurations(readFileSync(join(projectRoot, RULES_FILE), 'utf8'), shorter)
  const prometheus = await PrometheusServer.withFiles({
    'alerts.yml': rules,
    'prometheus.yml': [
      'global: { scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }',
      'rule_files: [alerts.yml]',
      `alerting: { alertmanagers: [{ static_configs: [{ targets: ['${alertmanager.address}'] }] }] }`,
      `scrape_configs: [{ job_name: portal-bff, static_configs: [{ targets: ['${address}'] }] }]`
    ].join('\n')
  })
  t.teardown(() => prometheus.stop())

  sandbox.crm.injectFault({ kind: 'http5xx', route: 'rest/query' })
  const order = await placeOrder(app, token)
  sandbox.crm.updateOrder(order.crmOrderId, { Status: 'Approved' })
  const faultAt = performance.now()

  const naming = (notification: Notification) => notification.body.alerts.some((alert) => alert.labels.alertname === ALERT)
  const pages = () => receiver.notifications.filter((notification) => notification.path === '/pager')
  await waitFor('the page', async () => pages().some(naming), 90_000)
  t.comment(`paged ${(((pages()[0]?.at ?? 0) - faultAt) / 1000).toFixed(1)} s after the CRM began refusing the query`)
  t.match(pages()[0]?.body, { status: 'firing', alerts: [{ labels: { alertname: ALERT, severity: 'warning', priority: 'P2', dependency: 'crm' }, annotations: { runbook_url: /reconciliation_crm_failed_rounds\.md$/ } }] }, 'a P2 page naming the CRM')

  sandbox.crm.clearFaults()
  await waitFor('the order Active', async () => (await app.inject({ url: `/api/orders/${order.id as string}`, headers: bearer(token) })).json().status === 'Active', 30_000)
  await waitFor('the resolve', async () => pages().some((notification) => notification.body.status === 'resolved'), 60_000)
  // Past another group_interval: nothing more comes.
  await sleep(10_000)
  const describe = (notification: Notification) => `${notification.body.status}: ${notification.body.alerts.map((alert) => `${alert.labels.alertname ?? '?'} ${alert.labels.severity ?? '?'} ${alert.status}`).join(', ')}`
  t.same(pages().map(describe), [`firing: ${ALERT} warning firing`, `resolved: ${ALERT} warning resolved`], 'one page, one resolve')
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { RULES_FILE } from '../../dev/scripts/alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { AlertmanagerServer, PrometheusServer, WebhookReceiver, operatorAlertmanagerConfig, receiversAt } from '../helpers/monitoring-servers.js'
import { skipWithout } from '../helpers/packages.js'
import { waitFor } from '../helpers/processes.js'

// The shipped monitoring as an operator starts it, with the settings docs/operations.md asks for
// and nothing else: the token file beside prometheus.yml, the receivers set (all to the test's
// webhook receiver), and the addresses. The intervals are the shipped ones (15 s).
const EVALUATION_S = Number(/^ {2}evaluation_interval: (\d+)s$/m.exec(readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/prometheus.yml'), 'utf8'))?.[1])
// A loaded machine: Prometheus's start itself, a late evaluation, Alertmanager's dispatch.
const MARGIN_S = 10
// Prometheus learns its Alertmanager from service discovery, whose first update can take 5 s; an
// alert evaluated before that is dropped (prometheus_notifications_dropped_total), and a firing
// alert is sent again only after --rules.alert.resend-delay (1 minute by default).
const RESEND_DELAY_S = 60

/** Alerts Prometheus dropped for want of an Alertmanager, from its own /metrics. */
async function dropped (prometheus: PrometheusServer): Promise<number> {
  const text = await (await fetch(`${prometheus.url}/metrics`)).text()
  return Number(/^prometheus_notifications_dropped_total (\S+)$/m.exec(text)?.[1] ?? 0)
}

t.setTimeout(180_000)

t.test('the Watchdog reaches its receiver within one evaluation of Prometheus\'s start, on the shipped files as the documentation has them set', { skip: skipWithout(['prometheus', 'prometheus-alertmanager']) }, async (t) => {
  const receiver = await WebhookReceiver.start()
  t.teardown(() => receiver.stop())
  const alertmanager = await AlertmanagerServer.start({ config: operatorAlertmanagerConfig(receiversAt(receiver.address)) })
  t.teardown(() => alertmanager.stop())

  const shipped = readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/prometheus.yml'), 'utf8')
  const files = {
    'prometheus.yml': shipped.replace("targets: ['127.0.0.1:9093']", `targets: ['${alertmanager.address}']`),
    'alerts.yml': readFileSync(join(projectRoot, RULES_FILE), 'utf8'),
    // The first step of docs/operations.md.
    'portal-bff-ops-token': 'an-operations-token-of-the-test'
  }
  t.not(files['prometheus.yml'], shipped, 'Prometheus sends to the test\'s Alertmanager')

  const started = performance.now()
  const prometheus = await PrometheusServer.withFiles(files)
  t.teardown(() => prometheus.stop())
  await waitFor('the Watchdog notification', async () => receiver.watchdog.length > 0, (RESEND_DELAY_S + EVALUATION_S + MARGIN_S + 30) * 1000)
  const afterS = ((receiver.watchdog[0]?.at ?? Infinity) - started) / 1000
  // Evaluated before Prometheus knew its Alertmanager, the first is dropped: the next comes a resend delay later.
  const early = await dropped(prometheus) > 0
  // The resend lands on the first evaluation after the delay.
  const boundS = EVALUATION_S + MARGIN_S + (early ? RESEND_DELAY_S + EVALUATION_S : 0)
  t.ok(afterS <= boundS, `the Watchdog reached its receiver ${afterS.toFixed(1)} s after Prometheus was started (bound ${boundS} s: one evaluation of ${EVALUATION_S} s${early ? `, after the resend delay of ${RESEND_DELAY_S} s: the first evaluation came before Prometheus knew its Alertmanager` : ''})`)
  t.match(receiver.watchdog[0]?.body, { status: 'firing', alerts: [{ labels: { alertname: 'Watchdog', severity: 'none' } }] })
  t.same(receiver.notifications.map((notification) => notification.path), [], 'and nothing else was sent')
})

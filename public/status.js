/* global document, fetch, setInterval */
// The status page: polls status/summary (relative, so the page also works behind a path prefix)
// every 30 s, the specification's polling interval. Served as a file: the service's CSP allows no inline script.
'use strict'

const REFRESH_MS = 30_000
const LEVEL_OF = { ok: 'ok', fail: 'critical', healthy: 'ok', degraded: 'warning', unhealthy: 'critical' }
// standby (another instance holds the subscription) and disabled are normal: no colour.
const SUBSCRIBER_LEVEL = { connected: 'ok', connecting: 'warning', failed: 'critical' }
const UNITS = { ms: ' ms', seconds: ' s', percent: ' %', requests: '', jobs: '', 'failing checks': '' }
// Where the repository keeps the runbooks, and where the service serves them (relative to /status).
const RUNBOOKS = 'docs/runbooks'
const SERVED_RUNBOOKS = 'status/runbooks'

const $ = (selector) => document.querySelector(selector)

function element (tag, text, attributes = {}) {
  const node = document.createElement(tag)
  if (text !== undefined) node.textContent = String(text)
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) node.setAttribute(name, value)
  }
  return node
}

function badge (node, text, level) {
  node.textContent = text
  node.dataset.level = level
}

/** rows: [label, value, level?] */
function describe (list, rows) {
  list.replaceChildren(...rows.flatMap(([label, value, level]) => [
    element('dt', label),
    element('dd', value, { 'data-level': level })
  ]))
}

function noData (list, text) {
  list.replaceChildren(element('dd', text, { class: 'nodata' }))
}

function withUnit (value, unit) {
  return value === null ? 'no data' : `${value}${UNITS[unit] ?? ` ${unit}`}`
}

function renderQueue (section, queue) {
  badge(section.querySelector('[data-field=health]'), queue.health, LEVEL_OF[queue.health])
  const { metrics } = queue
  describe(section.querySelector('[data-list=metrics]'), [
    ['waiting', metrics.queueSize],
    ['in flight', metrics.pendingRequests],
    ['failed (recent)', queue.recentFailedRequests],
    ['failed (total)', metrics.failedRequests],
    ['completed', metrics.completedRequests],
    ['total', metrics.totalRequests],
    ['average wait', `${metrics.averageWaitTime} ms`],
    ['average execution', `${metrics.averageExecutionTime} ms`]
  ])
}

function renderUsage (section, usage, alert) {
  const text = section.querySelector('[data-field=usage]')
  text.textContent = usage.limit === null
    ? `${usage.used} calls, limit unknown`
    : `${usage.used} of ${usage.limit} (${usage.percent} %)`
  text.dataset.level = alert.level
  const meter = section.querySelector('[data-field=meter]')
  meter.value = usage.percent ?? 0
  meter.low = alert.threshold.warning
  meter.high = alert.threshold.critical
  meter.title = `warning above ${alert.threshold.warning} %, critical above ${alert.threshold.critical} %`
}

function renderJobs (list, jobs, alerts) {
  if (jobs === null) return noData(list, 'no data')
  describe(list, [
    ['waiting', jobs.waiting, alerts.job_queue_waiting.level],
    ['active', jobs.active],
    ['delayed', jobs.delayed],
    ['failed (recent)', jobs.recentFailed, alerts.job_queue_failed.level],
    ['failed (total)', jobs.failed],
    ['completed', jobs.completed]
  ])
}

function age (ms) {
  if (ms === null) return 'none'
  const seconds = Math.round(ms / 1000)
  return seconds < 120 ? `${seconds} s` : seconds < 7200 ? `${Math.round(seconds / 60)} min` : `${Math.round(seconds / 3600)} h`
}

// Awaiting approval is the CRM's people's pace, never judged; approved but not received is the alert's.
function renderOrders (list, orders, alert) {
  if (orders === null) return noData(list, 'no data')
  describe(list, [
    ['awaiting approval', orders.awaitingApproval.count],
    ['oldest awaiting', age(orders.awaitingApproval.oldestAgeMs)],
    ['approved, not received', orders.approvedNotReceived.count, alert.level],
    ['oldest approved', age(orders.approvedNotReceived.oldestAgeMs), alert.level],
    ['CRM status unknown', orders.unknown.count]
  ])
}

function renderSubscriber (list, subscriber) {
  if (subscriber === null) return noData(list, 'no data')
  describe(list, [
    ['state', subscriber.state, SUBSCRIBER_LEVEL[subscriber.state]],
    ['last event', subscriber.lastEventAt === null ? 'none yet' : new Date(subscriber.lastEventAt).toLocaleString()],
    ['replay id', subscriber.replayId ?? 'none'],
    ['received', subscriber.received],
    ['reconnects', subscriber.reconnects],
    // Parked: their hand-off failed for good; an operator mends the data and retries them (runbook events_parked).
    ['parked', subscriber.parked ?? 'no data', subscriber.parked > 0 ? 'warning' : subscriber.parked === null ? undefined : 'ok'],
    ['last error', subscriber.lastError ?? 'none']
  ])
}

function renderStreams (list, streams) {
  if (streams === null) return noData(list, 'no data')
  describe(list, [
    ['open', streams.open],
    ['refused, user at its limit', streams.refused.user_limit],
    ['refused, instance full', streams.refused.instance_limit]
  ])
}

function runbookCell (measure) {
  const cell = element('td', undefined, { class: 'runbook' })
  cell.append(element('a', `${RUNBOOKS}/${measure}.md`, { href: `${SERVED_RUNBOOKS}/${measure}.md`, target: '_blank', rel: 'noopener' }))
  return cell
}

function renderAlerts (body, alerts) {
  body.replaceChildren(...alerts.map((alert) => {
    const comparison = alert.threshold.comparison === 'above' ? '>' : '<'
    const row = element('tr', undefined, { id: `alert-${alert.measure}`, 'data-level': alert.level, 'data-measure': alert.measure })
    const level = element('span', alert.level, { class: 'badge', 'data-level': alert.level })
    const levelCell = element('td')
    levelCell.append(level)
    row.append(
      element('td', alert.description, { title: alert.measure }),
      element('td', withUnit(alert.value, alert.unit), { class: 'num' }),
      element('td', `${comparison} ${withUnit(alert.threshold.warning, alert.unit)}`, { class: 'num' }),
      element('td', `${comparison} ${withUnit(alert.threshold.critical, alert.unit)}`, { class: 'num' }),
      levelCell,
      element('td', alert.priority ?? ''),
      element('td', alert.note ?? '', { class: 'nodata' }),
      runbookCell(alert.measure)
    )
    return row
  }))
}

function render (summary) {
  const alerts = Object.fromEntries(summary.alerts.map((alert) => [alert.measure, alert]))
  document.body.dataset.level = summary.level
  badge($('#overall'), summary.level, summary.level)
  // The rows that set the overall level, each a link to its row and its runbook.
  const cause = $('#cause')
  const setting = summary.alerts.filter((alert) => alert.level === summary.level && alert.level !== 'ok')
  cause.replaceChildren(...setting.flatMap((alert, index) => [
    ...(index === 0 ? [] : [document.createTextNode(', ')]),
    element('a', alert.description, { href: `#alert-${alert.measure}`, title: `runbook: ${RUNBOOKS}/${alert.measure}.md`, 'data-measure': alert.measure })
  ]))
  cause.hidden = setting.length === 0
  const updated = $('#updated')
  updated.textContent = new Date(summary.timestamp).toLocaleTimeString()
  updated.dateTime = summary.timestamp

  badge($('#core [data-field=status]'), summary.core.status, summary.core.status === 'ok' ? 'ok' : 'critical')
  describe($('#core [data-list=checks]'), Object.entries(summary.core.checks).map(([name, status]) => [name, status, LEVEL_OF[status]]))
  if (summary.billing !== null) renderQueue($('#billing'), summary.billing)
  if (summary.crm !== null) {
    renderQueue($('#crm'), summary.crm)
    renderUsage($('#crm'), summary.crm.dailyUsage, alerts.crm_daily_usage)
  }
  renderJobs($('#jobs [data-list=counts]'), summary.jobs, alerts)
  renderOrders($('#orders [data-list=counts]'), summary.orders, alerts.orders_pending_age)
  renderSubscriber($('#subscriber [data-list=stats]'), summary.subscriber)
  renderStreams($('#streams [data-list=counts]'), summary.streams)
  renderAlerts($('#alerts tbody'), summary.alerts)
}

async function refresh () {
  const banner = $('#error')
  try {
    const response = await fetch('status/summary', { headers: { accept: 'application/json' }, cache: 'no-store' })
    if (!response.ok) throw new Error(`HTTP ${response.status}`)
    render(await response.json())
    banner.hidden = true
    document.body.dataset.loaded = 'true'
  } catch (error) {
    banner.textContent = `Could not reach the service (${error.message}); showing the last answer.`
    banner.hidden = false
  }
}

$('#refresh').addEventListener('click', refresh)
refresh()
setInterval(refresh, REFRESH_MS)

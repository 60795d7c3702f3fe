import t from 'tap'
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DASHBOARD_FILE, FOR, HELD_BACK_BY, WATCHDOG, PAGE_CONDITIONS, RULES_FILE, RULE_TESTS_FILE, RUNBOOK_DIRECTORY, FIRING_ALERTS_EXPR, SERVICE_PANELS, alertName, alertingRules, allRules, conditionExpr, panelExpr, readRulesFile, renderAlertRules, rulePriority, runbookBaseUrl, valueExpr, type RuleNode } from '../../dev/scripts/alert-rules.js'
import { SERVICE_RULES, SERVICE_RULE_CASES } from '../../dev/scripts/service-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { ROWS, THRESHOLDS } from '../../plugins/app/monitoring/thresholds.js'
import { pages } from '../../plugins/app/monitoring/threshold-row.js'
import { generatedFiles, outOfDate } from '../../dev/scripts/generate-alert-rules.js'
import { promtool, testRules } from '../../dev/scripts/promtool.js'
import { skipWithout } from '../helpers/packages.js'

t.test('the checked-in rules, rule tests and dashboard are what plugins/app/monitoring/thresholds.ts generates', async (t) => {
  for (const { path, content } of generatedFiles()) {
    t.equal(readFileSync(join(projectRoot, path), 'utf8'), content, `${path} is up to date (npm run monitoring:generate)`)
  }
  t.same(outOfDate(), [], 'the generator\'s --check agrees')
})

const RULE_COUNT = 2 * THRESHOLDS.length + SERVICE_RULES.length
const shipped = () => readRulesFile(readFileSync(join(projectRoot, RULES_FILE), 'utf8'))
/** The group of the table's rules and the service's own, and the Watchdog's. */
const groupOf = (name: string) => shipped().groups.find((group) => group.name === name)
const portalRules = () => (groupOf('portal-bff')?.rules ?? []).filter((rule): rule is RuleNode & { alert: string } => rule.alert !== undefined)

t.test('a warning and a critical rule per row of the thresholds table, and the service\'s own rules, after the page conditions', async (t) => {
  const rules = portalRules()
  t.equal(rules.length, RULE_COUNT, `${RULE_COUNT} rules`)
  t.equal(groupOf('portal-bff')?.rules[0]?.record, PAGE_CONDITIONS, 'the page conditions are recorded first: the pages evaluated after them read this evaluation\'s')
  for (const row of ROWS) {
    const direction = row.comparison === 'above' ? '>' : '<'
    for (const severity of ['warning', 'critical'] as const) {
      // Where settings move a row's limits, the rule compares with the gauge of the limit the service judges with.
      const exported = row.configurable?.[severity]
      const limit = exported === undefined ? String(row[severity]) : `max without (instance) (${exported.metric})`
      const condition = conditionExpr(row, severity)
      t.match(condition, ` ${direction} ${limit}`, `${row.measure}: the ${severity} condition compares with ${direction} ${limit}`)
      const rule = rules.find((candidate) => candidate.alert === alertName(row) && candidate.labels?.severity === severity)
      t.equal(rule?.labels?.measure, row.measure)
      const heldBack = pages(row.priority[severity]) && HELD_BACK_BY[alertName(row)] !== undefined
      const start = row.shared === true ? condition : heldBack ? `((${condition}) unless on (job, instance) ALERTS{` : `(${condition}) or on (job, instance) `
      t.ok(rule?.expr.startsWith(start), `${row.measure}: the ${severity} rule is its condition${row.shared === true ? '' : ', kept while its scrapes fail'}${heldBack ? ', held back while a cause pages' : ''}`, { expr: rule?.expr })
    }
  }
})

t.test('a page that repeats its cause\'s does not start while the cause\'s page is pending or firing, and comes after it in the group', async (t) => {
  const rules = portalRules()
  for (const [alert, causes] of Object.entries(HELD_BACK_BY)) {
    const index = rules.findIndex((rule) => rule.alert === alert && ['P1', 'P2'].includes(rule.labels?.priority ?? ''))
    t.ok(index > 0, `${alert} pages`)
    const byInstance = ROWS.some((row) => row.shared !== true && alertName(row) === alert)
    t.match(rules[index]?.expr, `unless on (${byInstance ? 'job, instance' : 'job'}) ALERTS{alertname=~"${causes.join('|')}",severity="critical"}`, `${alert}: held back by ${causes.join(', ')}, in any state (pending too)`)
    for (const cause of causes) t.ok(rules.findIndex((rule) => rule.alert === cause && rule.labels?.severity === 'critical') < index, `${cause} is evaluated first: ${alert} reads its alert of the same evaluation`)
    t.notOk(rules.some((rule) => rule.alert === alert && !['P1', 'P2'].includes(rule.labels?.priority ?? '') && rule.expr.includes('unless on (job, instance) ALERTS')), `${alert}: its ticket is not held back`)
  }
})

t.test('a windowed measure fires only while it still holds over the last minute, past its warning limit', async (t) => {
  for (const row of ROWS.filter((candidate) => candidate.shared !== true && ['ratio', 'quantile'].includes(candidate.prometheus.kind))) {
    const recent = `${valueExpr(row.prometheus, [], '1m')} ${row.comparison === 'above' ? '>' : '<'} ${row.warning}`
    for (const level of ['warning', 'critical'] as const) t.match(conditionExpr(row, level), `and (${recent})`, `${row.measure} ${level}`)
  }
  t.match(conditionExpr(ROWS.find((row) => row.measure === 'billing_failed_requests')!, 'critical'), 'and (sum without (queue) (increase(portal_bff_queue_requests_failed_total{queue="billing"}[1m])) > 0)', 'billing failures: one in the last minute')
})

t.test('pages are the customers\' failures: availability, errors, latency, provisioning, and billing failing; cost and efficiency open tickets', async (t) => {
  const paging = ROWS.filter((row) => pages(row.priority.critical)).map((row) => row.measure)
  t.same(paging, ['core_status', 'billing_failed_requests', 'job_queue_waiting', 'job_queue_failed', 'orders_pending_age', 'reconciliation_crm_failed_rounds', 'api_response_time_p95', 'http_5xx_rate'])
  // Contract §10a: three failed rounds in a row, the warning, page (decision 0086).
  t.same(ROWS.filter((row) => pages(row.priority.warning)).map((row) => row.measure), ['reconciliation_crm_failed_rounds'], 'no other warning pages')
  for (const measure of ['cache_hit_rate', 'cache_latency', 'cache_memory']) t.notOk(pages(ROWS.find((row) => row.measure === measure)!.priority.critical), `${measure} opens a ticket`)
  const pageConditions = groupOf('portal-bff')?.rules.find((rule) => rule.record === PAGE_CONDITIONS)?.expr ?? ''
  for (const row of ROWS.filter((candidate) => candidate.shared !== true && pages(candidate.priority.critical))) {
    t.ok(pageConditions.includes(`(${conditionExpr(row, 'critical')})`), `${row.measure}: its page condition is recorded`)
  }
})

t.test('every rule has a priority P1-P4, a summary, a description and a runbook that exists', async (t) => {
  const rules = portalRules()
  t.equal(rules.length, RULE_COUNT, 'every rule is read')
  for (const { alert, labels = {}, annotations = {} } of rules) {
    const what = `${alert} ${labels.severity ?? '?'}`
    t.match(labels.priority, /^P[1-4]$/, `${what}: priority P1-P4`)
    t.ok((annotations.summary ?? '').length > 0, `${what}: a summary`)
    t.ok((annotations.description ?? '').length > 0, `${what}: a description`)
    t.equal(annotations.runbook_url, `${runbookBaseUrl()}${labels.measure ?? '?'}.md`, `${what}: runbook_url is an absolute link, of its measure`)
    t.ok(existsSync(join(projectRoot, RUNBOOK_DIRECTORY, `${labels.measure ?? 'missing'}.md`)), `${what}: its runbook exists`)
  }
  for (const row of ROWS) {
    for (const level of ['warning', 'critical'] as const) {
      const rule = rules.find(({ alert, labels }) => alert === alertName(row) && labels?.severity === level)
      const expected = row.priority[level]
      t.equal(rule?.labels?.priority, expected, `${row.measure}: the ${level} rule is ${expected}`)
      t.equal(rulePriority(row, level), expected)
      t.match(rule?.annotations?.description, `Incident priority ${expected} (${pages(expected) ? 'a page' : 'a ticket'}): respond within`, `${row.measure}: the ${level} rule says its response time`)
    }
  }
  t.match(runbookBaseUrl(), /^https?:\/\/[^/]+\/.*\/$/, 'the base is one absolute setting (package.json config.runbookBaseUrl)')
  t.equal(alertingRules(readRulesFile(renderAlertRules('https://docs.test/runbooks/')))[0]?.annotations?.runbook_url, 'https://docs.test/runbooks/core_status.md', 'the runbook base can be given when rendering')
})

t.test('the Watchdog always fires, in a group of its own, with no priority, no `for:` and a runbook', async (t) => {
  const group = groupOf(WATCHDOG.group)
  t.equal(group?.rules.length, 1)
  const [watchdog] = group?.rules ?? []
  t.equal(watchdog?.alert, 'Watchdog')
  t.equal(watchdog?.expr, 'vector(1)', 'vector(1): always, whatever is scraped')
  t.equal(watchdog?.for, undefined, 'from the first evaluation')
  t.equal(watchdog?.labels?.priority, undefined, 'routed by its name, never with the pages or tickets')
  t.equal(watchdog?.annotations?.runbook_url, `${runbookBaseUrl()}watchdog.md`)
  t.ok(existsSync(join(projectRoot, RUNBOOK_DIRECTORY, 'watchdog.md')), 'its runbook exists')
})

t.test('each rule waits the `for:` of its priority: every page a minute, so an incident\'s alerts fire together', async (t) => {
  const shippedRules = portalRules()
  const rules = allRules()
  t.equal(shippedRules.length, rules.length)
  rules.forEach((rule, index) => {
    const shippedRule = shippedRules[index]
    t.equal(shippedRule?.for, FOR[rule.priority], `${rule.alert} ${rule.labels.severity ?? '?'}: for ${FOR[rule.priority]} (${rule.priority})`)
    t.equal(shippedRule?.labels?.priority, rule.priority)
    t.notOk(shippedRule !== undefined && 'keep_firing_for' in shippedRule, 'no alert outlives its condition by a fixed time')
  })
  t.same([FOR.P1, FOR.P2, FOR.P3, FOR.P4], ['1m', '1m', '5m', '10m'], 'pages together and soon, tickets later')
  t.same(Object.keys(SERVICE_RULE_CASES).sort(), [...new Set(SERVICE_RULES.map((rule) => rule.alert))].sort(), 'every service rule has promtool cases')
})

t.test('the runbook index lists every measure with the priority of each level', async (t) => {
  const index = readFileSync(join(projectRoot, RUNBOOK_DIRECTORY, 'README.md'), 'utf8')
  for (const row of ROWS) {
    const line = index.split('\n').find((candidate) => candidate.includes(`(${row.measure}.md)`))
    t.ok(line, `${row.measure} is in the index`)
    t.match(line, `| ${rulePriority(row, 'warning')} | ${rulePriority(row, 'critical')} |`, `${row.measure}: warning ${rulePriority(row, 'warning')}, critical ${rulePriority(row, 'critical')}`)
  }
  for (const measure of new Set(SERVICE_RULES.map((rule) => rule.measure))) {
    const line = index.split('\n').find((candidate) => candidate.includes(`(${measure}.md)`))
    t.ok(line, `${measure} is in the index`)
    for (const level of ['warning', 'critical'] as const) {
      const priority = SERVICE_RULES.find((rule) => rule.measure === measure && rule.severity === level)?.priority ?? '-'
      t.match(line, new RegExp(`\\| ${level === 'warning' ? `${priority} \\| \\S+` : `\\S+ \\| ${priority}`} \\|`), `${measure}: ${level} ${priority}`)
    }
  }
  for (const file of [...ROWS.map((row) => row.measure), ...SERVICE_RULES.map((rule) => rule.measure)].map((measure) => `${measure}.md`)) {
    const page = readFileSync(join(projectRoot, RUNBOOK_DIRECTORY, file), 'utf8')
    for (const section of ['## What it means', '## First checks', '## Fix', '## Escalate']) t.match(page, section, `${file}: ${section}`)
    t.notMatch(page, /\bseed\b/i, `${file} says specification`)
  }
})

t.test('the dashboard lists every firing alert, has a panel per row on its measure with its thresholds, and the subscription, orders and provisioning', async (t) => {
  const dashboard = JSON.parse(readFileSync(join(projectRoot, DASHBOARD_FILE), 'utf8')) as { panels: Array<{ title: string, targets: Array<{ expr: string, exemplar?: boolean }>, fieldConfig: { defaults: { thresholds: { steps: Array<{ value: number | null }> } } } }> }
  const firing = dashboard.panels.find((panel) => panel.title === 'Firing alerts')
  t.equal(firing?.targets[0]?.expr, FIRING_ALERTS_EXPR)
  t.notMatch(FIRING_ALERTS_EXPR, 'instance', 'no instance filter: an alert of the job has no instance label')
  for (const { title, expr } of SERVICE_PANELS) t.equal(dashboard.panels.find((panel) => panel.title === title)?.targets[0]?.expr, expr, `${title}: a panel`)
  const withExemplars = dashboard.panels.filter((panel) => panel.targets[0]?.exemplar === true)
  t.same(withExemplars.map((panel) => panel.targets[0]?.expr), ['histogram_quantile(0.95, sum by (le, route) (rate(portal_bff_http_request_duration_seconds_bucket{instance=~"$instance"}[5m])))'],
    'the request duration in seconds shows the exemplars, at their value: a sampled request\'s trace')
  for (const metric of ['portal_bff_event_subscription_holder_state', 'portal_bff_orders_awaiting_approval', 'portal_bff_orders_approved_not_received_total', 'portal_bff_order_provisioning_lag_seconds_bucket']) {
    t.ok(SERVICE_PANELS.some(({ expr }) => expr.includes(`${metric}{`)), `a panel shows ${metric}`)
  }
  for (const row of THRESHOLDS) {
    const panel = dashboard.panels.find((candidate) => candidate.title === row.description)
    t.ok(panel, `${row.measure} has a panel`)
    t.equal(panel?.targets[0]?.expr, panelExpr(row), `${row.measure}: the same measure as the rule`)
    t.match(panel?.targets[0]?.expr, row.measure === 'telecom_response_time' ? '[1h]' : /^[^[]*$|\[5m\]/, `${row.measure}: over 5 minutes, or an hour where calls are few`)
    t.same(panel?.fieldConfig.defaults.thresholds.steps.map((step) => step.value).filter((value) => value !== null).sort((a, b) => a! - b!), [row.warning, row.critical].sort((a, b) => a - b), `${row.measure}: its thresholds`)
  }
})

const skip = skipWithout(['promtool'])
t.test('promtool: the rules are valid and each fires at its threshold', { skip }, async (t) => {
  const check = await promtool(['check', 'rules', RULES_FILE])
  t.equal(check.code, 0, 'promtool check rules', { output: check.output })
  t.match(check.output, `SUCCESS: ${RULE_COUNT + 2} rules found`, 'and the recording of the page conditions, and the Watchdog')
  const test = await testRules(RULE_TESTS_FILE)
  t.equal(test.code, 0, 'promtool test rules: every rule fires just past its threshold and not before', { output: test.output })
})

t.test('promtool: the shipped scrape configuration is valid and authorizes with the operations token file', { skip }, async (t) => {
  const directory = mkdtempSync(join(tmpdir(), 'portal-bff-prometheus-'))
  t.teardown(() => rmSync(directory, { recursive: true, force: true }))
  for (const file of ['prometheus.yml', 'alerts.yml']) copyFileSync(join(projectRoot, 'deploy/monitoring/prometheus', file), join(directory, file))
  const config = readFileSync(join(directory, 'prometheus.yml'), 'utf8')
  t.match(config, /authorization:\n\s+type: Bearer\n\s+credentials_file: portal-bff-ops-token/, 'the token is read from a file, never written in the configuration')
  t.not((await promtool(['check', 'config', join(directory, 'prometheus.yml')])).code, 0, 'without the token file, the configuration is refused')
  writeFileSync(join(directory, 'portal-bff-ops-token'), 'an-operations-token-of-the-test', { mode: 0o600 })
  const check = await promtool(['check', 'config', join(directory, 'prometheus.yml')])
  t.equal(check.code, 0, 'promtool check config', { output: check.output })
  t.match(check.output, /SUCCESS: \d+ rules found/)
})

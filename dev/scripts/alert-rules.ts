import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Document, parse } from 'yaml'
import { projectRoot } from '../../lib/project-root.js'
import { HISTOGRAMS } from '../../plugins/app/monitoring/metrics.js'
import { ROWS, THRESHOLDS, threshold, type MeasureName } from '../../plugins/app/monitoring/thresholds.js'
import type { Level } from '../../plugins/app/monitoring/levels.js'
import { INCIDENT_PRIORITIES, POST_INCIDENT_REVIEW_BUSINESS_DAYS, pages, type Matchers, type PrometheusSource, type Priority, type Threshold, type Unit } from '../../plugins/app/monitoring/threshold-row.js'
import { SERVICE_RULES, SERVICE_RULE_CASES, type ServiceRule } from './service-rules.js'

/**
 * The Prometheus side of the thresholds table: each row's PromQL, the alerting rules, their promtool
 * unit tests and the Grafana dashboard, all rendered from plugins/app/monitoring/thresholds.ts by
 * dev/scripts/generate-alert-rules.ts.
 */

export const RATE_WINDOW = '5m'
/**
 * A windowed measure also has to hold over this last stretch (past its warning limit) for its rule to
 * fire: an outage its 5-minute window still holds, once over, neither pages nor keeps a page open.
 */
export const RECENT_WINDOW = '1m'
/**
 * How long a condition must hold before its alert fires, by priority. Every page waits the same
 * minute, so that the alerts of one incident fire together and reach on-call as one notification;
 * a ticket waits longer, so that a short blip opens none. With the shipped scrape and evaluation
 * interval of 15 s, an alert fires at most `for` + 30 s after its condition starts holding in the
 * scraped values: a page within 1.5 min, a P3 ticket 5.5 min, a P4 ticket 10.5 min.
 */
export const FOR: Record<Priority, string> = { P1: '1m', P2: '1m', P3: '5m', P4: '10m' }
/**
 * Every page of an instance keeps firing while any page condition of that instance holds (and while
 * its scrapes fail), so that the alerts of one incident resolve at the same evaluation: one
 * "resolved" notification, never a symptom left firing alone.
 */
export const PAGE_CONDITIONS = 'instance:portal_bff_page_conditions:count'
export const GROUP_NAME = 'portal-bff'
export const RULES_FILE = 'deploy/monitoring/prometheus/alerts.yml'
export const RULE_TESTS_FILE = 'deploy/monitoring/prometheus/alerts.test.yml'
export const DASHBOARD_FILE = 'deploy/monitoring/grafana/portal-bff.json'
/** The runbooks in this repository, one per measure: `<measure>.md`. */
export const RUNBOOK_DIRECTORY = 'docs/runbooks'

/** A runbook base as given (`what` names where): an absolute http(s) URL ending in `/`. */
export function checkedRunbookBase (base: string | undefined, what: string): string {
  if (base === undefined || !/^https?:\/\/[^/]+\/(?:.*\/)?$/.test(base)) throw new Error(`${what} must be an absolute http(s) URL ending in /`)
  return base
}

/**
 * Where the shipped rules say the runbooks are, as an absolute URL ending in `/`: every rule's
 * `runbook_url` is this and `<measure>.md`. One setting, `config.runbookBaseUrl` of package.json,
 * so that generating and checking agree: the service's own copy (`/status/runbooks/`, readable
 * without the operations token) through the shipped balancer (deploy/haproxy/haproxy.cfg, on the
 * monitoring host as the shipped prometheus.yml addresses it). An operator whose people open them
 * elsewhere prints the rules with their own base (`--runbook-base-url`, docs/operations.md).
 */
export function runbookBaseUrl (): string {
  const { config } = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as { config?: { runbookBaseUrl?: string } }
  return checkedRunbookBase(config?.runbookBaseUrl, 'package.json config.runbookBaseUrl')
}

const HEADER = [
  '# Generated from plugins/app/monitoring/thresholds.ts and dev/scripts/service-rules.ts by dev/scripts/generate-alert-rules.ts: do not edit by hand.',
  '# Regenerate with `npm run monitoring:generate`; CI fails while this file is out of date.'
]

type Row = Threshold

function matcher (label: string, value: string | readonly string[]): string {
  return typeof value === 'string' ? `${label}=${JSON.stringify(value)}` : `${label}=~${JSON.stringify(value.join('|'))}`
}

function selector (metric: string, match: Matchers = {}, extra: readonly string[] = []): string {
  const parts = [...Object.entries(match).map(([label, value]) => matcher(label, value)), ...extra]
  return parts.length === 0 ? metric : `${metric}{${parts.join(',')}}`
}

function sumWithout (labels: readonly string[] | undefined, expression: string): string {
  return labels === undefined || labels.length === 0 ? expression : `sum without (${labels.join(', ')}) (${expression})`
}

/** The samples a ratio or percentile is of over the rate window, with the value's labels. */
function sampleCount (source: PrometheusSource, extra: readonly string[], without: readonly string[] | undefined): string {
  if (source.kind === 'ratio') return sumWithout(without, `increase(${selector(source.metric, {}, extra)}[${RATE_WINDOW}])`)
  if (source.kind === 'quantile') return sumWithout(without, `increase(${selector(`${source.histogram}_count`, source.match, extra)}[${RATE_WINDOW}])`)
  throw new Error(`a ${source.kind} row has no samples to count`)
}

/**
 * The PromQL of a row's value, in the row's unit, where the service would judge it: a share or
 * percentile of fewer than `minSamples` (the row's) has no value, as in /health/alerts. `extra`
 * matchers go into every selector.
 */
export function judgedExpr (row: Row, extra: readonly string[] = [], minSamples = row.minSamples): string {
  const source = row.prometheus
  if (minSamples === undefined) return row.shared === true ? `max without (instance) (${valueExpr(source, extra)})` : valueExpr(source, extra)
  if (source.kind === 'quantile' && source.maxOver !== undefined) {
    // Each value of `maxOver` (each upstream) is judged on its own samples before the highest is taken.
    const perValue = `histogram_quantile(0.95, ${sumWithout(source.without, `rate(${selector(`${source.histogram}_bucket`, source.match, extra)}[${RATE_WINDOW}])`)})`
    return `1000 * max without (${source.maxOver}) (${perValue} and ${sampleCount(source, extra, source.without)} >= ${minSamples})`
  }
  const without = source.kind === 'ratio' || source.kind === 'quantile' ? source.without : undefined
  return `(${valueExpr(source, extra)}) and ${sampleCount(source, extra, without)} >= ${minSamples}`
}

/**
 * The PromQL of a row's value, in the row's unit, over `window` for the rates and percentiles.
 * `extra` matchers go into every selector (the dashboard's instance filter).
 */
export function valueExpr (source: PrometheusSource, extra: readonly string[] = [], window = RATE_WINDOW): string {
  switch (source.kind) {
    case 'gauge':
      return sumWithout(source.without, selector(source.metric, source.match, extra))
    case 'failing':
      return sumWithout(source.without, `1 - ${selector(source.metric, {}, extra)}`)
    case 'quotient':
      return `100 * ${selector(source.numerator, {}, extra)} / ${selector(source.denominator, {}, extra)}`
    case 'ratio': {
      const part = 'is' in source.part ? `${source.label}=${JSON.stringify(source.part.is)}` : `${source.label}!=${JSON.stringify(source.part.not)}`
      const rate = (matchers: readonly string[]) => sumWithout(source.without, `rate(${selector(source.metric, {}, matchers)}[${window}])`)
      return `100 * ${rate([part, ...extra])} / ${rate(extra)}`
    }
    case 'quantile': {
      const buckets = `rate(${selector(`${source.histogram}_bucket`, source.match, extra)}[${window}])`
      const quantile = `histogram_quantile(0.95, ${sumWithout(source.without, buckets)})`
      return `1000 * ${source.maxOver === undefined ? quantile : `max without (${source.maxOver}) (${quantile})`}`
    }
  }
}

function limitOf (row: Row, level: Exclude<Level, 'ok'>): number {
  return level === 'warning' ? row.warning : row.critical
}

/** A row's limit in PromQL: the number, or the gauge of the limit the service judges with when settings move it. */
function limitExpr (row: Row, level: Exclude<Level, 'ok'>): string {
  const exported = row.configurable?.[level]
  if (exported === undefined) return String(limitOf(row, level))
  return row.shared === true ? `max without (instance) (${exported.metric})` : exported.metric
}

const operator = (row: Row) => row.comparison === 'above' ? '>' : '<'

/** The samples a rule judges a row on: its minimum, or a cost row's volume (decision 0058). */
export function ruleMinSamples (row: Row): number | undefined {
  return row.costVolume === undefined ? row.minSamples : Math.max(row.minSamples ?? 0, row.costVolume)
}

/**
 * Whether a row's windowed value still holds over the last RECENT_WINDOW, past its warning limit (one
 * condition for both levels, so that they end together); undefined for values that are not windowed.
 */
export function recentExpr (row: Row): string | undefined {
  const source = row.prometheus
  if (row.shared === true) return undefined
  if (source.kind === 'ratio' || source.kind === 'quantile') return `${valueExpr(source, [], RECENT_WINDOW)} ${operator(row)} ${row.warning}`
  if (source.kind === 'gauge' && source.recent !== undefined) {
    const { counter, match, without } = source.recent
    return `${sumWithout(without, `increase(${selector(counter, match)}[${RECENT_WINDOW}])`)} > 0`
  }
  return undefined
}

/** A row's own condition at a level: past the limit, on enough samples, and still now. */
export function conditionExpr (row: Row, level: Exclude<Level, 'ok'>): string {
  const minSamples = ruleMinSamples(row)
  const judged = judgedExpr(row, [], minSamples)
  const compared = `${minSamples === undefined ? judged : `(${judged})`} ${operator(row)} ${limitExpr(row, level)}`
  const recent = recentExpr(row)
  return recent === undefined ? compared : `(${compared}) and (${recent})`
}

/** This rule's alert, firing at the previous evaluation, with only the labels of its expression. */
function firingSelf (row: Row, level: Exclude<Level, 'ok'>): string {
  const ruleLabelNames = ['alertname', 'alertstate', ...Object.keys(ruleLabels(row, level))]
  return `max without (${ruleLabelNames.join(', ')}) (ALERTS{alertname="${alertName(row)}",alertstate="firing",severity="${level}"})`
}

/**
 * The pages that only repeat what a cause page says, by alert name, with the measures of their
 * causes: while a cause's page is pending or firing, on the same instance (or anywhere in the job,
 * for a page of the job), they do not start. So one incident reaches the pager as one alert, whose
 * firing and resolve no flush of Alertmanager can split, whatever its timing, and no alert held
 * back ever reaches it, not even as "resolved" (decision 0105). A cause page outlives every page
 * condition of its instance (PAGE_CONDITIONS), so a symptom cannot start after it either.
 * Alertmanager's inhibition cannot do this: it holds an alert back only while its source fires,
 * and sends the resolve of an alert it held back.
 */
export const HELD_BACK_BY: Readonly<Record<string, readonly string[]>> = {
  PortalBffHttp5xxRate: ['PortalBffCoreStatus', 'PortalBffBillingFailedRequests'],
  PortalBffApiResponseTimeP95: ['PortalBffCoreStatus', 'PortalBffBillingFailedRequests'],
  PortalBffInstanceDown: ['PortalBffNoInstanceUp'],
  PortalBffEventSubscriptionNoHolder: ['PortalBffCoreStatus', 'PortalBffNoInstanceUp'],
  PortalBffEventSubscriptionNotConnected: ['PortalBffCoreStatus', 'PortalBffNoInstanceUp']
}

/** The critical alerts, pending or firing, of the cause pages. */
function causePages (causes: readonly string[]): string {
  return `ALERTS{alertname=~"${causes.join('|')}",severity="critical"}`
}

/** `expr`, held back while a cause page of `alert` is pending or firing (HELD_BACK_BY), matched `on` those labels. */
export function heldBack (alert: string, expr: string, on: string): string {
  const causes = HELD_BACK_BY[alert]
  return causes === undefined ? expr : `(${expr}) unless on (${on}) ${causePages(causes)}`
}

/**
 * A rule's expression. An instance's alert outlives its own condition while the instance's scrapes
 * fail (its series vanished with it: PortalBffInstanceDown says it), and a page also while any page
 * condition of the instance holds: the alerts of one incident end together. A page that a cause
 * page holds back does not start while the cause's is pending or firing (HELD_BACK_BY).
 */
export function ruleExpr (row: Row, level: Exclude<Level, 'ok'>): string {
  const condition = conditionExpr(row, level)
  if (row.shared === true) return condition
  const paging = pages(rulePriority(row, level))
  const keep = paging ? PAGE_CONDITIONS : 'up == 0'
  const starts = paging ? heldBack(alertName(row), condition, 'job, instance') : condition
  return `(${starts}) or on (job, instance) (${firingSelf(row, level)} and on (job, instance) ${keep})`
}

/** The recording rule of every page condition of an instance (and its failing scrapes), which the pages of the instance outlive. */
export function pageConditionsExpr (): string {
  const conditions = ROWS.filter((row) => row.shared !== true).flatMap((row) =>
    (['warning', 'critical'] as const).filter((level) => pages(rulePriority(row, level))).map((level) => `(${conditionExpr(row, level)})`))
  return `count by (job, instance) (${[...conditions, `up{job="${TARGET_LABELS.job}"} == 0`].join(' or ')})`
}

export function alertName (row: Row): string {
  return `PortalBff${row.measure.split('_').map((word) => `${word[0]?.toUpperCase() ?? ''}${word.slice(1)}`).join('')}`
}

function amount (value: number, unit: Unit): string {
  if (unit === 'percent') return `${value}%`
  if (unit === 'ms') return `${value} ms`
  if (unit === 'seconds') return `${value} s`
  return `${value} ${unit}`
}

/** The `priority` label Alertmanager routes on: P1 and P2 page, P3 and P4 open a ticket. */
export function rulePriority (row: Row, level: Exclude<Level, 'ok'>): Priority {
  return row.priority[level]
}

/** A measure's runbook: the published base and `<measure>.md`. */
export function runbookUrl (measure: string, base = runbookBaseUrl()): string {
  return `${base}${measure}.md`
}

function ruleLabels (row: Row, level: Exclude<Level, 'ok'>): Record<string, string> {
  return { severity: level, measure: row.measure, priority: rulePriority(row, level), ...(row.dependency !== undefined && { dependency: row.dependency }) }
}

function duration (minutes: number): string {
  if (minutes % 60 !== 0) return `${minutes} minutes`
  const hours = minutes / 60
  return hours === 1 ? '1 hour' : `${hours} hours`
}

/** A limit as the annotations say it: the amount, or the setting that moves it with its default. */
function limitText (row: Row, level: Exclude<Level, 'ok'>): string {
  const exported = row.configurable?.[level]
  const limit = amount(limitOf(row, level), row.unit)
  return exported === undefined ? limit : `${exported.setting} (${limit} by default)`
}

function response (priority: Priority): string {
  const { respondWithinMinutes, postIncidentReview } = INCIDENT_PRIORITIES[priority]
  const what = pages(priority) ? 'a page' : 'a ticket'
  return ` Incident priority ${priority} (${what}): respond within ${duration(respondWithinMinutes)}${postIncidentReview ? `, post-incident review within ${POST_INCIDENT_REVIEW_BUSINESS_DAYS} business days` : ''}.`
}

function ruleAnnotations (row: Row, level: Exclude<Level, 'ok'>, runbookBase?: string): Record<string, string> {
  const direction = row.comparison === 'above' ? 'above' : 'below'
  const thresholds = `Thresholds (specification §8): warning ${direction} ${limitText(row, 'warning')}, critical ${direction} ${limitText(row, 'critical')}.`
  const priority = rulePriority(row, level)
  return {
    summary: `${row.description}: ${direction} ${limitText(row, level)} (${level}, ${priority})`,
    description: `${thresholds}${'note' in row && row.note !== undefined ? ` Note: ${row.note}.` : ''}${response(priority)} Current values of every measure: GET /health/alerts.`,
    runbook_url: runbookUrl(row.measure, runbookBase)
  }
}

/** One alerting rule as the rules file writes it. */
export interface AlertRule {
  alert: string
  expr: string
  priority: Priority
  labels: Record<string, string>
  annotations: Record<string, string>
}

/**
 * The warning and the critical rule of every row of the thresholds table, the pages first: Prometheus
 * sends each rule's alerts as it evaluates it, so the pages of an incident, which resolve at the same
 * evaluation, reach Alertmanager together, before it can send the one without the other.
 */
export function thresholdRules (runbookBase?: string, rows: readonly Row[] = ROWS): AlertRule[] {
  const rules = rows.flatMap((row) => (['warning', 'critical'] as const).map((level) => ({
    alert: alertName(row),
    expr: ruleExpr(row, level),
    priority: rulePriority(row, level),
    labels: ruleLabels(row, level),
    annotations: ruleAnnotations(row, level, runbookBase)
  })))
  return [...rules.filter((rule) => pages(rule.priority)), ...rules.filter((rule) => !pages(rule.priority))]
}

/** The rules of the service itself (instances, the subscription, provisioning), beside the table's. */
export function serviceRules (runbookBase?: string): AlertRule[] {
  return SERVICE_RULES.map((rule) => ({
    alert: rule.alert,
    expr: heldBack(rule.alert, rule.expr, 'job'),
    priority: rule.priority,
    labels: { severity: rule.severity, measure: rule.measure, priority: rule.priority },
    annotations: serviceRuleAnnotations(rule, runbookBase)
  }))
}

export function serviceRuleAnnotations (rule: ServiceRule, runbookBase?: string): Record<string, string> {
  return {
    summary: `${rule.summary} (${rule.severity}, ${rule.priority})`,
    description: `${rule.description}${response(rule.priority)}`,
    runbook_url: runbookUrl(rule.measure, runbookBase)
  }
}

/**
 * The dead man's switch, as kube-prometheus ships it: an alert that always fires, routed to a
 * receiver of its own (deploy/monitoring/alertmanager/alertmanager.yml) that a dead man's switch
 * service watches. When it stops coming, Prometheus, its rules, Alertmanager or the path to the
 * pager is down, and that service pages. No priority: it routes by its name, and nothing inhibits it.
 */
export const WATCHDOG = { alert: 'Watchdog', group: 'watchdog', expr: 'vector(1)', labels: { severity: 'none', measure: 'watchdog' } } as const

export function watchdogAnnotations (runbookBase?: string): Record<string, string> {
  return {
    summary: 'Always firing: proves that Prometheus, its rules, Alertmanager and the watchdog receiver work',
    description: 'This alert fires as long as Prometheus evaluates its rules and reaches Alertmanager, which sends it to the watchdog receiver every minute. The dead man\'s switch service behind that receiver pages when it stops coming. Never silence it.',
    runbook_url: runbookUrl(WATCHDOG.labels.measure, runbookBase)
  }
}

export function allRules (runbookBase?: string): AlertRule[] {
  return [...thresholdRules(runbookBase), ...serviceRules(runbookBase)]
}

/** A rule of a Prometheus rules file, as the file holds it. */
export interface RuleNode {
  record?: string
  alert?: string
  expr: string
  for?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
}

/** A Prometheus rules file. */
export interface RulesFile { groups: Array<{ name: string, rules: RuleNode[] }> }

/** A Prometheus YAML file's text: every string quoted, no line folded (PromQL reads as it is). */
export function yamlText (content: unknown, comment?: readonly string[]): string {
  const document = new Document(content)
  if (comment !== undefined) document.commentBefore = comment.map((line) => line.replace(/^#/, '')).join('\n')
  return document.toString({ lineWidth: 0, defaultStringType: 'QUOTE_DOUBLE', defaultKeyType: 'PLAIN' })
}

/** A rules file read back (the checked-in one, or one printed with --print). */
export function readRulesFile (text: string): RulesFile {
  const file = parse(text) as RulesFile | null
  if (file === null || !Array.isArray(file.groups)) throw new Error('not a Prometheus rules file: no groups')
  return file
}

/** The alerting rules of a rules file, in order, every group's. */
export function alertingRules (file: RulesFile): Array<RuleNode & { alert: string }> {
  return file.groups.flatMap((group) => group.rules.filter((rule): rule is RuleNode & { alert: string } => rule.alert !== undefined))
}

/**
 * deploy/monitoring/prometheus/alerts.yml: the page conditions of each instance, then a warning and a
 * critical rule per row, then the service's own. `runbookBase` (by default package.json's
 * config.runbookBaseUrl) starts every `runbook_url`.
 */
export function alertRulesFile (runbookBase?: string): RulesFile {
  const rules = allRules(runbookBase)
  // A held-back page reads its causes' pages of the same evaluation: they come before it.
  rules.forEach((rule, index) => {
    for (const cause of HELD_BACK_BY[rule.alert] ?? []) {
      if (!rules.slice(0, index).some((earlier) => earlier.alert === cause && earlier.labels.severity === 'critical' && pages(earlier.priority))) throw new Error(`${rule.alert} is held back by ${cause}, whose critical page must come first`)
    }
  })
  return {
    groups: [
      {
        name: GROUP_NAME,
        rules: [
          { record: PAGE_CONDITIONS, expr: pageConditionsExpr() },
          ...rules.map(({ alert, expr, priority, labels, annotations }) => ({ alert, expr, for: FOR[priority], labels, annotations }))
        ]
      },
      { name: WATCHDOG.group, rules: [{ alert: WATCHDOG.alert, expr: WATCHDOG.expr, labels: { ...WATCHDOG.labels }, annotations: watchdogAnnotations(runbookBase) }] }
    ]
  }
}

export function renderAlertRules (runbookBase?: string): string {
  return yamlText(alertRulesFile(runbookBase), HEADER)
}

// --- promtool unit tests: each rule fires just past its threshold, and not on the ok side of it.

/** The labels Prometheus adds to every series it scrapes from the service. */
export const TARGET_LABELS = { job: 'portal-bff', instance: 'portal-bff:3000' } as const

export interface InputSeries { series: string, values: string }

/** Series are sampled every 30 s, so that a one-minute window (RECENT_WINDOW) holds two samples. */
export const SAMPLE_INTERVAL = '30s'
const STEPS_PER_MINUTE = 2
/** Long enough for the slowest `for` (P4, 10 min) to fire after a rate has two samples. */
export const SERIES_MINUTES = 20
const EVAL_TIME = '15m'

function seriesName (metric: string, labels: Record<string, string>): string {
  const all = { ...labels, ...TARGET_LABELS }
  return `${metric}{${Object.entries(all).map(([label, value]) => `${label}=${JSON.stringify(value)}`).join(',')}}`
}

/** A promtool series of a value that does not change, sampled every SAMPLE_INTERVAL. */
export const constant = (value: number) => `${value}+0x${SERIES_MINUTES * STEPS_PER_MINUTE}`
/** A promtool series of a counter growing by `perMinute` a minute, sampled every SAMPLE_INTERVAL. */
export const increasing = (perMinute: number) => `0+${perMinute / STEPS_PER_MINUTE}x${SERIES_MINUTES * STEPS_PER_MINUTE}`

function firstValues (match: Matchers = {}): Record<string, string> {
  return Object.fromEntries(Object.entries(match).map(([label, value]) => [label, typeof value === 'string' ? value : value[0] ?? '']))
}

export function bucketsOf (histogram: string): readonly number[] {
  const definition = Object.values(HISTOGRAMS).find((candidate) => candidate.name === histogram)
  if (definition === undefined) throw new Error(`No histogram ${histogram} in plugins/app/monitoring/metrics.ts`)
  return definition.buckets
}

/** The bucket after a threshold's; the threshold must be a bucket boundary. */
function nextBucket (histogram: string, limitMs: number): { at: number, next: number } {
  const buckets = bucketsOf(histogram)
  const index = buckets.indexOf(limitMs / 1000)
  const next = buckets[index + 1]
  if (index < 0 || next === undefined) throw new Error(`${histogram}: ${limitMs} ms must be a bucket boundary with a bucket above it`)
  return { at: limitMs / 1000, next }
}

/** Input series whose value is on the ok side of `limit` (`past` false) or just past it. */
export function seriesAt (row: Row, limit: number, past: boolean): InputSeries[] {
  const source = row.prometheus
  const above = row.comparison === 'above'
  switch (source.kind) {
    case 'gauge':
      return [
        { series: seriesName(source.metric, firstValues(source.match)), values: constant(past ? (above ? limit + 1 : limit - 1) : limit) },
        // What it counts still happens now, on either side of the limit: the gauge decides.
        ...(source.recent === undefined ? [] : [{ series: seriesName(source.recent.counter, firstValues(source.recent.match)), values: increasing(1) }])
      ]
    case 'failing': {
      const failing = past ? limit + 1 : limit
      return ['database', 'cache'].map((check, index) => ({ series: seriesName(source.metric, { check }), values: constant(index < failing ? 0 : 1) }))
    }
    case 'quotient':
      return [
        { series: seriesName(source.numerator, {}), values: constant(past ? (above ? limit + 1 : limit - 1) : limit) },
        { series: seriesName(source.denominator, {}), values: constant(100) }
      ]
    case 'ratio': {
      // Per mille, so the percentages have one decimal; half a percent either side of the limit.
      const percent = limit + (past === above ? 0.5 : -0.5)
      const part = Math.round(percent * 10)
      return [
        { series: seriesName(source.metric, { [source.label]: source.example.part }), values: increasing(part) },
        { series: seriesName(source.metric, { [source.label]: source.example.rest }), values: increasing(1000 - part) }
      ]
    }
    case 'quantile': {
      // 100 observations a minute: 96 at the threshold's bucket and 4 above puts the 95th percentile
      // below the threshold; 94 and 6 puts it just above.
      const { at, next } = nextBucket(source.histogram, limit)
      const within = past ? 94 : 96
      const labels = firstValues(source.match)
      const edges = [...bucketsOf(source.histogram).map(String), '+Inf']
      return [
        ...edges.map((le) => {
          const bound = le === '+Inf' ? Infinity : Number(le)
          const count = (bound >= at ? within : 0) + (bound >= next ? 100 - within : 0)
          return { series: seriesName(`${source.histogram}_bucket`, { ...labels, le }), values: increasing(count) }
        }),
        { series: seriesName(`${source.histogram}_count`, labels), values: increasing(100) }
      ]
    }
  }
}

/** Input series past a row's critical threshold, but of one sample a minute: too few to judge. */
export function fewSamplesSeries (row: Row): InputSeries[] {
  const source = row.prometheus
  if (source.kind === 'ratio') {
    const failing = row.comparison === 'above'
    return [
      { series: seriesName(source.metric, { [source.label]: source.example.part }), values: increasing(failing ? 1 : 0) },
      { series: seriesName(source.metric, { [source.label]: source.example.rest }), values: increasing(failing ? 0 : 1) }
    ]
  }
  if (source.kind !== 'quantile') throw new Error(`${row.measure}: a ${source.kind} row has no samples to count`)
  const { next } = nextBucket(source.histogram, row.critical)
  const labels = firstValues(source.match)
  return [
    ...[...bucketsOf(source.histogram).map(String), '+Inf'].map((le) => ({
      series: seriesName(`${source.histogram}_bucket`, { ...labels, le }),
      values: increasing((le === '+Inf' ? Infinity : Number(le)) >= next ? 1 : 0)
    })),
    { series: seriesName(`${source.histogram}_count`, labels), values: increasing(1) }
  ]
}

/** The alerts a level fires for a row: the warning from warning on, both at critical. */
export function expectedAlerts (row: Row, level: Level, targetLabels: Record<string, string> = TARGET_LABELS): Array<{ exp_labels: Record<string, string>, exp_annotations: Record<string, string> }> {
  const levels = level === 'ok' ? [] : level === 'warning' ? ['warning' as const] : ['warning' as const, 'critical' as const]
  const { instance: _instance, ...sharedLabels } = targetLabels
  return levels.map((fired) => ({ exp_labels: { ...ruleLabels(row, fired), ...(row.shared === true ? sharedLabels : targetLabels) }, exp_annotations: ruleAnnotations(row, fired) }))
}

export interface ExpectedAlert { exp_labels: Record<string, string>, exp_annotations: Record<string, string> }

/** A threshold row's test: the alerts are those of the row at `level`. */
export interface RuleTest {
  name: string
  series: InputSeries[]
  alertname: string
  level: Level
  row: Row
}

/** A test of any rule: the alerts of each alert name expected at each evaluation time. */
export interface PromtoolCase {
  name: string
  series: InputSeries[]
  /** The spacing of the series' samples: SAMPLE_INTERVAL unless given. */
  interval?: string
  checks: Array<{ evalTime: string, alertname: string, alerts: ExpectedAlert[] }>
}

function caseNode ({ name, series, interval = SAMPLE_INTERVAL, checks }: PromtoolCase) {
  return {
    name,
    interval,
    input_series: series.map(({ series, values }) => ({ series, values })),
    alert_rule_test: checks.map(({ evalTime, alertname, alerts }) => ({ eval_time: evalTime, alertname, exp_alerts: alerts }))
  }
}

function thresholdCase ({ name, series, alertname, level, row }: RuleTest, targetLabels?: Record<string, string>): PromtoolCase {
  return { name, series, checks: [{ evalTime: EVAL_TIME, alertname, alerts: expectedAlerts(row, level, targetLabels) }] }
}

/** A promtool test file of the given tests against the rules file at `rulesPath`. */
export function renderRuleTests (tests: Array<RuleTest | PromtoolCase>, rulesPath: string, targetLabels?: Record<string, string>, comment?: readonly string[]): string {
  return yamlText({
    rule_files: [rulesPath],
    evaluation_interval: '1m',
    tests: tests.map((test) => caseNode('checks' in test ? test : thresholdCase(test, targetLabels)))
  }, comment)
}

/** Values of a series by stretches of whole minutes, sampled every SAMPLE_INTERVAL: `[[value, minutes], ...]`, `stale` to end it. */
function stretches (...parts: Array<[number, number] | 'stale'>): string {
  return parts.map((part) => part === 'stale' ? 'stale' : `${part[0]}+0x${part[1] * STEPS_PER_MINUTE - 1}`).join(' ')
}

/** A counter growing by `perMinute` for `minutes`, then flat until the series ends. */
function countsFor (perMinute: number, minutes: number): string {
  const steps = minutes * STEPS_PER_MINUTE
  return `0+${perMinute / STEPS_PER_MINUTE}x${steps} ${perMinute * minutes}+0x${SERIES_MINUTES * STEPS_PER_MINUTE - steps}`
}

const HTTP_5XX = 'portal_bff_http_request_duration_seconds_count'
const BILLING_FAILED = 'portal_bff_queue_recent_failed_requests'
const BILLING_FAILURES = 'portal_bff_queue_requests_failed_total'
const httpCount = (statusClass: string, values: string): InputSeries => ({ series: seriesName(HTTP_5XX, { status_class: statusClass, method: 'GET', route: '/api/invoices' }), values })

const criticalOnly = (row: Row) => expectedAlerts(row, 'critical').filter(({ exp_labels: labels }) => labels.severity === 'critical')
const warningOnly = (row: Row) => expectedAlerts(row, 'warning')

/** How the rules behave over time: what an incident's end does, and what fires not at all. */
export function incidentCases (): PromtoolCase[] {
  const fiveHundreds = threshold('http_5xx_rate')
  const billing = threshold('billing_failed_requests')
  const coreStatus = threshold('core_status')
  const hitRate = threshold('cache_hit_rate')
  const source = hitRate.prometheus
  if (source.kind !== 'ratio') throw new Error('cache_hit_rate is a ratio')
  return [
    {
      name: 'http_5xx_rate: an outage over at 8 minutes: it fired during it, and pages no more although its 5-minute window still holds it',
      series: [httpCount('5xx', countsFor(100, 8)), httpCount('2xx', increasing(100))],
      checks: [
        { evalTime: '7m', alertname: alertName(fiveHundreds), alerts: expectedAlerts(fiveHundreds, 'critical') },
        { evalTime: '10m', alertname: alertName(fiveHundreds), alerts: [] }
      ]
    },
    {
      name: 'billing fails until 8 minutes, its 5xx until 10: the billing page outlives its own end while the 5xx holds, the 5xx page is held back throughout (its ticket is not), and nothing pages after',
      series: [
        { series: seriesName(BILLING_FAILED, { queue: 'billing' }), values: constant(25) },
        { series: seriesName(BILLING_FAILURES, { queue: 'billing' }), values: countsFor(5, 8) },
        httpCount('5xx', countsFor(10, 10)),
        httpCount('2xx', increasing(100))
      ],
      checks: [
        // The warning, a ticket, waits 10 minutes: it never fires here.
        { evalTime: '7m', alertname: alertName(billing), alerts: criticalOnly(billing) },
        { evalTime: '7m', alertname: alertName(fiveHundreds), alerts: warningOnly(fiveHundreds) },
        { evalTime: '9m', alertname: alertName(billing), alerts: criticalOnly(billing) },
        { evalTime: '9m', alertname: alertName(fiveHundreds), alerts: warningOnly(fiveHundreds) },
        { evalTime: '11m', alertname: alertName(billing), alerts: [] },
        { evalTime: '11m', alertname: alertName(fiveHundreds), alerts: [] },
        { evalTime: '13m', alertname: alertName(fiveHundreds), alerts: [] }
      ]
    },
    {
      name: 'Redis fails until 6 minutes, the 5xx it causes until 7: core status pages alone, kept until the 5xx ends; the 5xx page never starts, not even after',
      series: [
        { series: seriesName('portal_bff_health_check_up', { check: 'database' }), values: constant(1) },
        { series: seriesName('portal_bff_health_check_up', { check: 'cache' }), values: stretches([1, 1], [0, 5], [1, 14]) },
        // 50 a minute from 1 to 6 minutes.
        httpCount('5xx', `0+0x1 0+25x10 250+0x${SERIES_MINUTES * STEPS_PER_MINUTE - 12}`),
        httpCount('2xx', increasing(100))
      ],
      checks: [
        // Without its cause, the 5xx page would fire from 3 minutes.
        { evalTime: '4m', alertname: alertName(coreStatus), alerts: criticalOnly(coreStatus) },
        { evalTime: '4m', alertname: alertName(fiveHundreds), alerts: [] },
        { evalTime: '6m30s', alertname: alertName(coreStatus), alerts: criticalOnly(coreStatus) },
        { evalTime: '6m30s', alertname: alertName(fiveHundreds), alerts: [] },
        { evalTime: '7m30s', alertname: alertName(coreStatus), alerts: [] },
        { evalTime: '7m30s', alertname: alertName(fiveHundreds), alerts: [] },
        { evalTime: '9m', alertname: alertName(fiveHundreds), alerts: [] }
      ]
    },
    {
      name: 'billing_failed_requests: the instance dies past the critical threshold: its page keeps firing while its scrapes fail, and ends when it answers again',
      series: [
        { series: seriesName(BILLING_FAILED, { queue: 'billing' }), values: stretches([25, 5], 'stale') },
        { series: seriesName(BILLING_FAILURES, { queue: 'billing' }), values: `${countsFor(5, 5).split(' ')[0] ?? ''} stale` },
        { series: seriesName('up', {}), values: stretches([1, 5], [0, 7], [1, 4]) }
      ],
      checks: [
        { evalTime: '11m', alertname: alertName(billing), alerts: criticalOnly(billing) },
        { evalTime: '13m', alertname: alertName(billing), alerts: [] }
      ]
    },
    {
      name: `cache_hit_rate: half the reads hit, of 40 a minute (a quiet portal): judged in /health/alerts, too little to cost anything: no ticket (at least ${hitRate.costVolume ?? 0} reads in 5 minutes)`,
      series: [
        { series: seriesName(source.metric, { [source.label]: source.example.part }), values: increasing(20) },
        { series: seriesName(source.metric, { [source.label]: source.example.rest }), values: increasing(20) }
      ],
      checks: [{ evalTime: EVAL_TIME, alertname: alertName(hitRate), alerts: [] }]
    }
  ]
}

/** The gauges of the limits a row's rules compare with when settings move them (none otherwise). */
function limitSeries (row: Row, limits: { warning: number, critical: number } = row): InputSeries[] {
  return (['warning', 'critical'] as const).flatMap((level) => {
    const exported = row.configurable?.[level]
    return exported === undefined ? [] : [{ series: seriesName(exported.metric, {}), values: constant(limits[level]) }]
  })
}

/** For every row: ok side of the warning threshold, past it, and past the critical one. */
export function thresholdTests (): RuleTest[] {
  return ROWS.flatMap((row): RuleTest[] => {
    const test = (label: string, limit: number, past: boolean, level: Level): RuleTest =>
      ({ name: `${row.measure}: ${label}`, series: [...seriesAt(row, limit, past), ...limitSeries(row)], alertname: alertName(row), level, row })
    const direction = row.comparison === 'above' ? 'above' : 'below'
    return [
      test(`not past the warning threshold (${direction} ${row.warning}): nothing fires`, row.warning, false, 'ok'),
      // Where warning and critical coincide (core status), past one is past the other.
      ...(row.warning === row.critical ? [] : [test('past the warning threshold: the warning fires', row.warning, true, 'warning')]),
      test(`past the critical threshold (${direction} ${row.critical}): warning and critical fire`, row.critical, true, 'critical'),
      ...(row.minSamples === undefined
        ? []
        : [{ name: `${row.measure}: past the critical threshold on too few samples (fewer than ${row.minSamples}): nothing fires`, series: fewSamplesSeries(row), alertname: alertName(row), level: 'ok' as const, row }])
    ]
  })
}

/**
 * The rows whose limits settings move, at a tenth of their defaults: a value between the moved
 * warning and critical limits (far below the defaults) fires the warning alone.
 */
export function movedLimitTests (): RuleTest[] {
  return ROWS.filter((row) => row.configurable !== undefined).map((row) => {
    const moved = { warning: row.warning / 10, critical: row.critical / 10 }
    return {
      name: `${row.measure}: the settings move the limits to ${moved.warning} and ${moved.critical}: past the moved warning limit, the warning fires`,
      series: [...seriesAt(row, moved.warning, true), ...limitSeries(row, moved)],
      alertname: alertName(row),
      level: 'warning',
      row
    }
  })
}

/** The promtool cases of the service's own rules, with the alerts each expects. */
export function serviceRuleCases (): PromtoolCase[] {
  return Object.entries(SERVICE_RULE_CASES).flatMap(([alertname, cases]) => cases.map((ruleCase) => {
    const rules = SERVICE_RULES.filter((rule) => rule.alert === alertname)
    if (rules.length === 0) throw new Error(`promtool cases of ${alertname}, which is no rule`)
    // Every instance of the case answers its scrapes unless the case says otherwise: PortalBffNoInstanceUp holds pages back.
    const instances = new Set(ruleCase.series.map(({ labels = {} }) => labels.instance ?? TARGET_LABELS.instance))
    const up = ruleCase.series.some(({ metric }) => metric === 'up') ? [] : [...instances].map((instance) => ({ metric: 'up', labels: { instance }, values: constant(1) }))
    return {
      name: `${alertname}: ${ruleCase.name}`,
      series: [...ruleCase.series, ...up].map(({ metric, labels = {}, values }) => ({
        series: `${metric}{${Object.entries({ ...TARGET_LABELS, ...labels }).map(([label, value]) => `${label}=${JSON.stringify(value)}`).join(',')}}`,
        values
      })),
      // The cases write their series a sample a minute.
      interval: '1m',
      checks: [{
        evalTime: EVAL_TIME,
        alertname,
        alerts: rules.filter((rule) => ruleCase.fires.includes(rule.severity)).map((rule) => ({
          exp_labels: { severity: rule.severity, measure: rule.measure, priority: rule.priority, ...(ruleCase.alertLabels ?? TARGET_LABELS) },
          exp_annotations: serviceRuleAnnotations(rule)
        }))
      }]
    }
  }))
}

/** The Watchdog fires from the first evaluation on, whatever the service's series. */
export function watchdogCase (): PromtoolCase {
  return {
    name: 'Watchdog: it fires from the first evaluation, with nothing scraped at all',
    series: [{ series: seriesName('up', {}), values: constant(0) }],
    checks: ['0m', EVAL_TIME].map((evalTime) => ({ evalTime, alertname: WATCHDOG.alert, alerts: [{ exp_labels: { ...WATCHDOG.labels }, exp_annotations: watchdogAnnotations() }] }))
  }
}

/** deploy/monitoring/prometheus/alerts.test.yml */
export function renderAlertRuleTests (): string {
  return renderRuleTests([...thresholdTests(), ...movedLimitTests(), ...incidentCases(), ...serviceRuleCases(), watchdogCase()], 'alerts.yml', undefined, HEADER)
}

// --- Grafana

const GRAFANA_UNITS: Record<Unit, string> = { ms: 'ms', seconds: 's', percent: 'percent', requests: 'short', jobs: 'short', 'failing checks': 'short', rounds: 'short' }

function thresholdSteps (row: Row) {
  return row.comparison === 'above'
    ? [{ color: 'green', value: null }, { color: 'orange', value: row.warning }, { color: 'red', value: row.critical }]
    : [{ color: 'red', value: null }, { color: 'orange', value: row.critical }, { color: 'green', value: row.warning }]
}

// Grafana's own variable syntax, not a template literal.
// eslint-disable-next-line no-template-curly-in-string
const DATASOURCE = { type: 'prometheus', uid: '${datasource}' }
const INSTANCE = 'instance=~"$instance"'

function timeseries (id: number, title: string, description: string, expr: string, unit: string, gridPos: object, steps?: unknown[], legendFormat = '{{instance}}', exemplars = false) {
  return {
    id,
    type: 'timeseries',
    title,
    description,
    datasource: DATASOURCE,
    gridPos,
    fieldConfig: {
      defaults: {
        unit,
        custom: { thresholdsStyle: { mode: steps === undefined ? 'off' : 'line+area' }, fillOpacity: 10 },
        thresholds: { mode: 'absolute', steps: steps ?? [{ color: 'green', value: null }] }
      },
      overrides: []
    },
    options: { legend: { displayMode: 'list', placement: 'bottom' }, tooltip: { mode: 'multi' } },
    // Exemplars (a sampled request's trace) drawn at their value: only where the panel's unit is the histogram's.
    targets: [{ refId: 'A', datasource: DATASOURCE, expr, legendFormat, ...(exemplars && { exemplar: true }) }]
  }
}

/**
 * Rows whose samples are few at a realistic volume (a telecom call per order): their panel shows
 * the percentile over an hour, or it would be empty most of the time.
 */
export const DASHBOARD_WINDOWS: Partial<Record<MeasureName, string>> = { telecom_response_time: '1h' }

/** The PromQL of a row's panel: its value (without the rules' minimum of samples), on the chosen instances. */
export function panelExpr (row: Row): string {
  return valueExpr(row.prometheus, [INSTANCE], DASHBOARD_WINDOWS[row.measure as MeasureName] ?? RATE_WINDOW)
}

/** Every alert of these rules firing now, of any instance or of none (the job's own, NoInstanceUp). */
export const FIRING_ALERTS_EXPR = 'ALERTS{alertstate="firing",alertname=~"PortalBff.*"}'

/** The panels beside the rows': what the subscription, orders and provisioning do. */
export const SERVICE_PANELS = [
  { title: 'Platform-event subscription: holder state', description: 'The lease holder\'s state as each instance sees it (disabled, none, connecting, connected, failed, stale, unknown)', expr: `portal_bff_event_subscription_holder_state{${INSTANCE}} == 1`, unit: 'short', legend: '{{instance}}: {{state}}' },
  { title: 'Platform-event subscription: age of the holder state', description: 'Seconds since the holder state was last confirmed: stale past two renewals, unknown past a takeover', expr: `portal_bff_event_subscription_holder_state_age_seconds{${INSTANCE}}`, unit: 's', legend: '{{instance}}' },
  { title: 'Platform events received', description: 'Events handed to the job queue, per 5 minutes', expr: `increase(portal_bff_event_subscriber_events_received_total{${INSTANCE}}[${RATE_WINDOW}])`, unit: 'short', legend: '{{instance}}' },
  { title: 'Orders awaiting approval in the CRM', description: 'Portal orders whose CRM order is still in Pending Review: waiting on a person, never alerted on', expr: `max without (instance) (portal_bff_orders_awaiting_approval{${INSTANCE}})`, unit: 'short', legend: 'awaiting approval' },
  { title: 'Orders provisioned by the reconciliation', description: 'Orders the CRM approved whose platform event never came, found and provisioned by the reconciliation, per hour', expr: `sum without (instance) (increase(portal_bff_orders_approved_not_received_total{${INSTANCE}}[1h]))`, unit: 'short', legend: 'approved, not received' },
  { title: 'Provisioning lag, 95th percentile over an hour', description: 'From a platform event handed off to its order Active. The page: above 900 s over 15 minutes', expr: `histogram_quantile(0.95, sum without (instance) (rate(portal_bff_order_provisioning_lag_seconds_bucket{${INSTANCE}}[1h])))`, unit: 's', legend: 'p95' },
  {
    title: 'Request duration by route, 95th percentile, with traces',
    description: 'Each dot is a sampled request\'s duration and trace (an exemplar): hovering shows its trace_id, and the data source\'s exemplar link opens the trace (docs/operations.md, "Tracing")',
    expr: `histogram_quantile(0.95, sum by (le, route) (rate(${HISTOGRAMS.http.name}_bucket{${INSTANCE}}[${RATE_WINDOW}])))`,
    unit: 's',
    legend: '{{route}}',
    exemplars: true
  },
  { title: 'Request queues: requests in flight', description: 'Billing and CRM request queues', expr: `portal_bff_queue_pending_requests{${INSTANCE}}`, unit: 'short', legend: '{{instance}} {{queue}}' },
  { title: 'Process CPU', description: 'CPU seconds per second', expr: `rate(process_cpu_seconds_total{${INSTANCE}}[${RATE_WINDOW}])`, unit: 'percentunit', legend: '{{instance}}' },
  { title: 'Process resident memory', description: 'Resident set size', expr: `process_resident_memory_bytes{${INSTANCE}}`, unit: 'bytes', legend: '{{instance}}' }
] as const

/** deploy/monitoring/grafana/portal-bff.json: every firing alert, one panel per row with its thresholds, the service's panels. */
export function renderDashboard (): string {
  let id = 0
  const panels: unknown[] = [{
    id: ++id,
    type: 'table',
    title: 'Firing alerts',
    description: 'Every alert of deploy/monitoring/prometheus/alerts.yml firing now, whatever the instance filter: the job\'s own alerts have no instance',
    datasource: DATASOURCE,
    gridPos: { x: 0, y: 0, w: 24, h: 6 },
    fieldConfig: { defaults: {}, overrides: [] },
    options: { showHeader: true },
    transformations: [{ id: 'organize', options: { excludeByName: { Time: true, Value: true, __name__: true, alertstate: true } } }],
    targets: [{ refId: 'A', datasource: DATASOURCE, expr: FIRING_ALERTS_EXPR, instant: true, format: 'table' }]
  }]
  THRESHOLDS.forEach((row, index) => {
    const gridPos = { x: (index % 3) * 8, y: 6 + Math.floor(index / 3) * 8, w: 8, h: 8 }
    const direction = row.comparison === 'above' ? '>' : '<'
    const window = DASHBOARD_WINDOWS[row.measure as MeasureName]
    const description = `${row.description}${window === undefined ? '' : ` (shown over ${window}: few samples)`}. Warning ${direction} ${amount(row.warning, row.unit)}, critical ${direction} ${amount(row.critical, row.unit)} (specification §8).`
    panels.push(timeseries(++id, row.description, description, panelExpr(row), GRAFANA_UNITS[row.unit], gridPos, thresholdSteps(row)))
  })
  const y = 6 + Math.ceil(THRESHOLDS.length / 3) * 8
  SERVICE_PANELS.forEach((panel, index) => {
    const { title, description, expr, unit, legend } = panel
    panels.push(timeseries(++id, title, description, expr, unit, { x: (index % 3) * 8, y: y + Math.floor(index / 3) * 8, w: 8, h: 8 }, undefined, legend, 'exemplars' in panel && panel.exemplars))
  })
  const dashboard = {
    __comment: 'Generated from plugins/app/monitoring/thresholds.ts by dev/scripts/generate-alert-rules.ts: do not edit by hand.',
    uid: 'portal-bff',
    title: 'Portal BFF',
    description: 'The measures of the monitoring thresholds (specification §8), with their warning and critical levels',
    tags: ['portal-bff'],
    timezone: 'utc',
    editable: true,
    schemaVersion: 39,
    version: 1,
    refresh: '30s',
    time: { from: 'now-6h', to: 'now' },
    templating: {
      list: [
        { name: 'datasource', label: 'Data source', type: 'datasource', query: 'prometheus', current: {}, hide: 0 },
        {
          name: 'instance',
          label: 'Instance',
          type: 'query',
          datasource: DATASOURCE,
          query: { query: 'label_values(portal_bff_health_check_up, instance)', refId: 'instance' },
          definition: 'label_values(portal_bff_health_check_up, instance)',
          refresh: 2,
          multi: true,
          includeAll: true,
          allValue: '.+',
          current: {},
          hide: 0
        }
      ]
    },
    annotations: { list: [] },
    panels
  }
  return `${JSON.stringify(dashboard, null, 2)}\n`
}

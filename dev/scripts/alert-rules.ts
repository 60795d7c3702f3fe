import { HISTOGRAMS } from '../../plugins/app/monitoring/metrics.js'
import {
  INCIDENT_PRIORITIES, POST_INCIDENT_REVIEW_BUSINESS_DAYS, ROWS, THRESHOLDS, threshold,
  type Level, type Matchers, type PrometheusSource, type Priority, type Threshold, type Unit
} from '../../plugins/app/monitoring/thresholds.js'
import { SERVICE_RULES, SERVICE_RULE_CASES, type ServiceRule } from './service-rules.js'

/**
 * The Prometheus side of the thresholds table: each row's PromQL, the alerting rules, their promtool
 * unit tests and the Grafana dashboard, all rendered from plugins/app/monitoring/thresholds.ts by
 * dev/scripts/generate-alert-rules.ts.
 */

export const RATE_WINDOW = '5m'
/**
 * How long a condition must hold before its alert fires, by priority: the higher the priority, the
 * sooner it pages, each far inside its response time (specification §8). With the shipped scrape
 * and evaluation interval of 15 s, an alert fires at most `for` + 30 s after its condition starts
 * holding in the scraped values: P1 1.5 min, P2 2.5 min, P3 5.5 min, P4 10.5 min. docs/runbooks/README.md says so.
 */
export const FOR: Record<Priority, string> = { P1: '1m', P2: '2m', P3: '5m', P4: '10m' }
/**
 * A threshold alert keeps firing this long after its series vanish: when an instance dies its
 * series go stale at once, and the alert would send "resolved" although nothing is fixed.
 * PortalBffInstanceDown fires within it (1 min + a scrape and an evaluation) and silences the
 * instance's other alerts in Alertmanager.
 */
export const KEEP_FIRING_FOR = '2m'
export const GROUP_NAME = 'portal-bff'
export const RULES_FILE = 'deploy/monitoring/prometheus/alerts.yml'
export const RULE_TESTS_FILE = 'deploy/monitoring/prometheus/alerts.test.yml'
export const DASHBOARD_FILE = 'deploy/monitoring/grafana/portal-bff.json'
/**
 * Where the runbooks live, relative to the root of this repository: every rule's `runbook_url` is
 * this directory and `<measure>.md`. It is relative on purpose (no host is assumed): an operator
 * resolves it against the site that publishes these docs, in the Alertmanager notification
 * template (see deploy/monitoring/alertmanager/alertmanager.yml), or renders the rules with a base of
 * their own (`renderAlertRules(base)`). The status page names the same path (public/status.js).
 */
export const RUNBOOK_DIRECTORY = 'docs/runbooks'

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
 * percentile of fewer than the row's `minSamples` has no value, as in /health/alerts. `extra`
 * matchers go into every selector (the dashboard's instance filter).
 */
export function judgedExpr (row: Row, extra: readonly string[] = []): string {
  const source = row.prometheus
  if (row.minSamples === undefined) return row.shared === true ? `max without (instance) (${valueExpr(source, extra)})` : valueExpr(source, extra)
  if (source.kind === 'quantile' && source.maxOver !== undefined) {
    // Each value of `maxOver` (each upstream) is judged on its own samples before the highest is taken.
    const perValue = `histogram_quantile(0.95, ${sumWithout(source.without, `rate(${selector(`${source.histogram}_bucket`, source.match, extra)}[${RATE_WINDOW}])`)})`
    return `1000 * max without (${source.maxOver}) (${perValue} and ${sampleCount(source, extra, source.without)} >= ${row.minSamples})`
  }
  const without = source.kind === 'ratio' || source.kind === 'quantile' ? source.without : undefined
  return `(${valueExpr(source, extra)}) and ${sampleCount(source, extra, without)} >= ${row.minSamples}`
}

/**
 * The PromQL of a row's value, in the row's unit. `extra` matchers go into every selector (the
 * dashboard's instance filter).
 */
export function valueExpr (source: PrometheusSource, extra: readonly string[] = []): string {
  switch (source.kind) {
    case 'gauge':
      return sumWithout(source.without, selector(source.metric, source.match, extra))
    case 'failing':
      return sumWithout(source.without, `1 - ${selector(source.metric, {}, extra)}`)
    case 'quotient':
      return `100 * ${selector(source.numerator, {}, extra)} / ${selector(source.denominator, {}, extra)}`
    case 'ratio': {
      const part = 'is' in source.part ? `${source.label}=${JSON.stringify(source.part.is)}` : `${source.label}!=${JSON.stringify(source.part.not)}`
      const rate = (matchers: readonly string[]) => sumWithout(source.without, `rate(${selector(source.metric, {}, matchers)}[${RATE_WINDOW}])`)
      return `100 * ${rate([part, ...extra])} / ${rate(extra)}`
    }
    case 'quantile': {
      const buckets = `rate(${selector(`${source.histogram}_bucket`, source.match, extra)}[${RATE_WINDOW}])`
      const quantile = `histogram_quantile(0.95, ${sumWithout(source.without, buckets)})`
      return `1000 * ${source.maxOver === undefined ? quantile : `max without (${source.maxOver}) (${quantile})`}`
    }
  }
}

function limitOf (row: Row, level: Exclude<Level, 'ok'>): number {
  return level === 'warning' ? row.warning : row.critical
}

export function ruleExpr (row: Row, level: Exclude<Level, 'ok'>): string {
  const value = judgedExpr(row)
  return `${row.minSamples === undefined ? value : `(${value})`} ${row.comparison === 'above' ? '>' : '<'} ${limitOf(row, level)}`
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

/**
 * The incident priority of a rule, the `priority` label Alertmanager routes on: a critical rule has
 * its row's (P1 or P2); a warning is lower: P3 for a P1 row and P4 for a P2 row, so that a
 * warning opens a ticket and only a critical pages.
 */
export function rulePriority (row: Row, level: Exclude<Level, 'ok'>): Priority {
  if (level === 'critical') return row.priority
  return row.priority === 'P1' ? 'P3' : 'P4'
}

/** A measure's runbook, relative to `base` (by default the root of this repository). */
export function runbookUrl (measure: string, base = ''): string {
  return `${base}${RUNBOOK_DIRECTORY}/${measure}.md`
}

function ruleLabels (row: Row, level: Exclude<Level, 'ok'>): Record<string, string> {
  return { severity: level, measure: row.measure, priority: rulePriority(row, level) }
}

function duration (minutes: number): string {
  if (minutes % 60 !== 0) return `${minutes} minutes`
  const hours = minutes / 60
  return hours === 1 ? '1 hour' : `${hours} hours`
}

function ruleAnnotations (row: Row, level: Exclude<Level, 'ok'>, runbookBase = ''): Record<string, string> {
  const direction = row.comparison === 'above' ? 'above' : 'below'
  const thresholds = `Thresholds (specification §8): warning ${direction} ${amount(row.warning, row.unit)}, critical ${direction} ${amount(row.critical, row.unit)}.`
  const priority = rulePriority(row, level)
  const { respondWithinMinutes, postIncidentReview } = INCIDENT_PRIORITIES[priority]
  const response = ` Incident priority ${priority}: respond within ${duration(respondWithinMinutes)}${postIncidentReview ? `, post-incident review within ${POST_INCIDENT_REVIEW_BUSINESS_DAYS} business days` : ''}.`
  return {
    summary: `${row.description}: ${direction} ${amount(limitOf(row, level), row.unit)} (${level}, ${priority})`,
    description: `${thresholds}${'note' in row && row.note !== undefined ? ` Note: ${row.note}.` : ''}${response} Current values of every measure: GET /health/alerts.`,
    runbook_url: runbookUrl(row.measure, runbookBase)
  }
}

const q = (value: string | number) => JSON.stringify(value)

function yamlMap (indent: string, map: Record<string, string>): string[] {
  return Object.entries(map).map(([key, value]) => `${indent}${key}: ${q(value)}`)
}

/** One alerting rule as the rules file writes it. */
export interface AlertRule {
  alert: string
  expr: string
  priority: Priority
  keepFiringFor?: string
  labels: Record<string, string>
  annotations: Record<string, string>
}

/** The warning and the critical rule of every row of the thresholds table. */
export function thresholdRules (runbookBase = ''): AlertRule[] {
  return ROWS.flatMap((row) => (['warning', 'critical'] as const).map((level) => ({
    alert: alertName(row),
    expr: ruleExpr(row, level),
    priority: rulePriority(row, level),
    keepFiringFor: KEEP_FIRING_FOR,
    labels: ruleLabels(row, level),
    annotations: ruleAnnotations(row, level, runbookBase)
  })))
}

/** The rules of the service itself (instances, the subscription, provisioning), beside the table's. */
export function serviceRules (runbookBase = ''): AlertRule[] {
  return SERVICE_RULES.map((rule) => ({
    alert: rule.alert,
    expr: rule.expr,
    priority: rule.priority,
    labels: { severity: rule.severity, measure: rule.measure, priority: rule.priority },
    annotations: serviceRuleAnnotations(rule, runbookBase)
  }))
}

export function serviceRuleAnnotations (rule: ServiceRule, runbookBase = ''): Record<string, string> {
  const { respondWithinMinutes, postIncidentReview } = INCIDENT_PRIORITIES[rule.priority]
  return {
    summary: `${rule.summary} (${rule.severity}, ${rule.priority})`,
    description: `${rule.description} Incident priority ${rule.priority}: respond within ${duration(respondWithinMinutes)}${postIncidentReview ? `, post-incident review within ${POST_INCIDENT_REVIEW_BUSINESS_DAYS} business days` : ''}.`,
    runbook_url: runbookUrl(rule.measure, runbookBase)
  }
}

export function allRules (runbookBase = ''): AlertRule[] {
  return [...thresholdRules(runbookBase), ...serviceRules(runbookBase)]
}

/**
 * deploy/monitoring/prometheus/alerts.yml: a warning and a critical rule per row, then the service's own.
 * `runbookBase` prefixes every `runbook_url` (the checked-in file has none: the URLs stay relative).
 */
export function renderAlertRules (runbookBase = ''): string {
  const lines = [...HEADER, 'groups:', `  - name: ${GROUP_NAME}`, '    rules:']
  for (const rule of allRules(runbookBase)) {
    lines.push(
      `      - alert: ${rule.alert}`,
      `        expr: ${q(rule.expr)}`,
      `        for: ${FOR[rule.priority]}`,
      ...(rule.keepFiringFor === undefined ? [] : [`        keep_firing_for: ${rule.keepFiringFor}`]),
      '        labels:',
      ...yamlMap('          ', rule.labels),
      '        annotations:',
      ...yamlMap('          ', rule.annotations)
    )
  }
  return `${lines.join('\n')}\n`
}

// --- promtool unit tests: each rule fires just past its threshold, and not on the ok side of it.

/** The labels Prometheus adds to every series it scrapes from the service. */
export const TARGET_LABELS = { job: 'portal-bff', instance: 'portal-bff:3000' } as const

export interface InputSeries { series: string, values: string }

/** Long enough for the slowest `for` (P4, 10 min) to fire after a rate has two samples. */
export const SERIES_LENGTH = 20
const EVAL_TIME = '15m'

function seriesName (metric: string, labels: Record<string, string>): string {
  const all = { ...labels, ...TARGET_LABELS }
  return `${metric}{${Object.entries(all).map(([label, value]) => `${label}=${JSON.stringify(value)}`).join(',')}}`
}

const constant = (value: number) => `${value}+0x${SERIES_LENGTH}`
const increasing = (perMinute: number) => `0+${perMinute}x${SERIES_LENGTH}`

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
      return [{ series: seriesName(source.metric, firstValues(source.match)), values: constant(past ? (above ? limit + 1 : limit - 1) : limit) }]
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

/** A test of any rule: the alerts expected at each evaluation time. */
export interface PromtoolCase {
  name: string
  series: InputSeries[]
  alertname: string
  checks: Array<{ evalTime: string, alerts: ExpectedAlert[] }>
}

function renderCase ({ name, series, alertname, checks }: PromtoolCase): string[] {
  const lines = [
    `  - name: ${q(name)}`,
    '    interval: 1m',
    '    input_series:',
    ...series.flatMap(({ series, values }) => [`      - series: ${q(series)}`, `        values: ${q(values)}`]),
    '    alert_rule_test:'
  ]
  for (const { evalTime, alerts } of checks) {
    lines.push(`      - eval_time: ${evalTime}`, `        alertname: ${alertname}`)
    if (alerts.length === 0) {
      lines.push('        exp_alerts: []')
      continue
    }
    lines.push('        exp_alerts:')
    for (const { exp_labels: labels, exp_annotations: annotations } of alerts) {
      lines.push('          - exp_labels:', ...yamlMap('              ', labels), '            exp_annotations:', ...yamlMap('              ', annotations))
    }
  }
  return lines
}

function thresholdCase ({ name, series, alertname, level, row }: RuleTest, targetLabels?: Record<string, string>): PromtoolCase {
  return { name, series, alertname, checks: [{ evalTime: EVAL_TIME, alerts: expectedAlerts(row, level, targetLabels) }] }
}

/** A promtool test file of the given tests against the rules file at `rulesPath`. */
export function renderRuleTests (tests: Array<RuleTest | PromtoolCase>, rulesPath: string, targetLabels?: Record<string, string>): string {
  return `${[
    `rule_files:\n  - ${q(rulesPath)}`,
    'evaluation_interval: 1m',
    'tests:',
    ...tests.flatMap((test) => renderCase('checks' in test ? test : thresholdCase(test, targetLabels)))
  ].join('\n')}\n`
}

/**
 * A threshold alert past its critical limit whose series go stale (its instance died): it keeps
 * firing for KEEP_FIRING_FOR, then resolves.
 */
export function vanishedSeriesCase (): PromtoolCase {
  const row = threshold('billing_failed_requests')
  const past = seriesAt(row, row.critical, true).map(({ series, values }) => ({ series, values: `${values.split('+')[0] ?? '0'}+0x10 stale` }))
  const keep = Number.parseInt(KEEP_FIRING_FOR, 10)
  return {
    name: `${row.measure}: the instance dies past the critical threshold: its alerts keep firing ${KEEP_FIRING_FOR}, then resolve`,
    series: past,
    alertname: alertName(row),
    checks: [
      { evalTime: `${11 + keep - 1}m`, alerts: expectedAlerts(row, 'critical') },
      { evalTime: `${11 + keep + 1}m`, alerts: [] }
    ]
  }
}

/** For every row: ok side of the warning threshold, past it, and past the critical one. */
export function thresholdTests (): RuleTest[] {
  return ROWS.flatMap((row): RuleTest[] => {
    const test = (label: string, limit: number, past: boolean, level: Level): RuleTest =>
      ({ name: `${row.measure}: ${label}`, series: seriesAt(row, limit, past), alertname: alertName(row), level, row })
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

/** The promtool cases of the service's own rules, with the alerts each expects. */
export function serviceRuleCases (): PromtoolCase[] {
  return Object.entries(SERVICE_RULE_CASES).flatMap(([alertname, cases]) => cases.map((ruleCase) => {
    const rules = SERVICE_RULES.filter((rule) => rule.alert === alertname)
    if (rules.length === 0) throw new Error(`promtool cases of ${alertname}, which is no rule`)
    return {
      name: `${alertname}: ${ruleCase.name}`,
      series: ruleCase.series.map(({ metric, labels = {}, values }) => ({
        series: `${metric}{${Object.entries({ ...TARGET_LABELS, ...labels }).map(([label, value]) => `${label}=${JSON.stringify(value)}`).join(',')}}`,
        values
      })),
      alertname,
      checks: [{
        evalTime: EVAL_TIME,
        alerts: rules.filter((rule) => ruleCase.fires.includes(rule.severity)).map((rule) => ({
          exp_labels: { severity: rule.severity, measure: rule.measure, priority: rule.priority, ...(ruleCase.alertLabels ?? TARGET_LABELS) },
          exp_annotations: serviceRuleAnnotations(rule)
        }))
      }]
    }
  }))
}

/** deploy/monitoring/prometheus/alerts.test.yml */
export function renderAlertRuleTests (): string {
  return `${HEADER.join('\n')}\n${renderRuleTests([...thresholdTests(), vanishedSeriesCase(), ...serviceRuleCases()], 'alerts.yml')}`
}

// --- Grafana

const GRAFANA_UNITS: Record<Unit, string> = { ms: 'ms', seconds: 's', percent: 'percent', requests: 'short', jobs: 'short', 'failing checks': 'short' }

function thresholdSteps (row: Row) {
  return row.comparison === 'above'
    ? [{ color: 'green', value: null }, { color: 'orange', value: row.warning }, { color: 'red', value: row.critical }]
    : [{ color: 'red', value: null }, { color: 'orange', value: row.critical }, { color: 'green', value: row.warning }]
}

// Grafana's own variable syntax, not a template literal.
// eslint-disable-next-line no-template-curly-in-string
const DATASOURCE = { type: 'prometheus', uid: '${datasource}' }
const INSTANCE = 'instance=~"$instance"'

function timeseries (id: number, title: string, description: string, expr: string, unit: string, gridPos: object, steps?: unknown[], legendFormat = '{{instance}}') {
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
    targets: [{ refId: 'A', datasource: DATASOURCE, expr, legendFormat }]
  }
}

/** deploy/monitoring/grafana/portal-bff.json: one panel per row, with its thresholds, and the process. */
export function renderDashboard (): string {
  let id = 0
  const panels: unknown[] = [{
    id: ++id,
    type: 'stat',
    title: 'Firing alerts',
    description: 'Alerts of deploy/monitoring/prometheus/alerts.yml firing now, by severity',
    datasource: DATASOURCE,
    gridPos: { x: 0, y: 0, w: 24, h: 4 },
    fieldConfig: { defaults: { unit: 'short', thresholds: { mode: 'absolute', steps: [{ color: 'green', value: null }, { color: 'red', value: 1 }] } }, overrides: [] },
    options: { reduceOptions: { calcs: ['lastNotNull'] }, colorMode: 'background', textMode: 'value_and_name' },
    targets: [{ refId: 'A', datasource: DATASOURCE, expr: `count by (severity) (ALERTS{alertstate="firing",alertname=~"PortalBff.*",${INSTANCE}})`, legendFormat: '{{severity}}' }]
  }]
  THRESHOLDS.forEach((row, index) => {
    const gridPos = { x: (index % 3) * 8, y: 4 + Math.floor(index / 3) * 8, w: 8, h: 8 }
    const direction = row.comparison === 'above' ? '>' : '<'
    const description = `${row.description}. Warning ${direction} ${amount(row.warning, row.unit)}, critical ${direction} ${amount(row.critical, row.unit)} (specification §8).`
    panels.push(timeseries(++id, row.description, description, judgedExpr(row, [INSTANCE]), GRAFANA_UNITS[row.unit], gridPos, thresholdSteps(row)))
  })
  const y = 4 + Math.ceil(THRESHOLDS.length / 3) * 8
  panels.push(
    timeseries(++id, 'Request queues: requests in flight', 'Billing and CRM request queues', `portal_bff_queue_pending_requests{${INSTANCE}}`, 'short', { x: 0, y, w: 8, h: 8 }, undefined, '{{instance}} {{queue}}'),
    timeseries(++id, 'Process CPU', 'CPU seconds per second', `rate(process_cpu_seconds_total{${INSTANCE}}[${RATE_WINDOW}])`, 'percentunit', { x: 8, y, w: 8, h: 8 }),
    timeseries(++id, 'Process resident memory', 'Resident set size', `process_resident_memory_bytes{${INSTANCE}}`, 'bytes', { x: 16, y, w: 8, h: 8 })
  )
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

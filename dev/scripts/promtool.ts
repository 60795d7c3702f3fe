import { spawn } from 'node:child_process'
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, dirname, join, resolve } from 'node:path'
import { parse, stringify } from 'yaml'
import { RULES_FILE, alertName, constant, increasing, renderRuleTests, type InputSeries } from './alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { threshold, type MeasureName } from '../../plugins/app/monitoring/thresholds.js'
import type { Level } from '../../plugins/app/monitoring/levels.js'

/** Prometheus's promtool (Debian package `prometheus`), or undefined when it is not on the PATH. */
export function findPromtool (): string | undefined {
  for (const directory of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(directory, 'promtool')
    try {
      accessSync(candidate, constants.X_OK)
      return candidate
    } catch {}
  }
  return undefined
}

export interface PromtoolResult { code: number | null, output: string }

/**
 * Runs promtool without holding the event loop: a test's app and its upstream simulators share the
 * process, and seconds without their timers let the simulators' idle keep-alive sockets expire under
 * the app's connection pools, so that the next calls meet closed connections.
 */
export async function promtool (args: string[], options: { cwd?: string, input?: string } = {}): Promise<PromtoolResult> {
  const executable = findPromtool()
  if (executable === undefined) throw new Error('promtool is not installed (Debian package prometheus)')
  // The rule tests take about 20 s alone (in four parts at once), and a minute beside other test files on 2 cores.
  const child = spawn(executable, args, { cwd: options.cwd ?? projectRoot, timeout: 170_000 })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  child.stdin.end(options.input)
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', resolve)
  })
  return { code, output: `${stdout}${stderr}` }
}

/**
 * `promtool test rules` on a rule-test file, its cases split over `parts` promtool processes at once.
 * promtool spends most of a case waiting, not computing (about 0.7 s a case, a quarter of it CPU):
 * side by side, the parts take a fraction of the one run's time for the same CPU.
 */
export async function testRules (file: string, parts = 4): Promise<PromtoolResult> {
  const path = resolve(projectRoot, file)
  const document = parse(readFileSync(path, 'utf8')) as { rule_files: string[], tests: unknown[] } & Record<string, unknown>
  const directory = mkdtempSync(join(tmpdir(), 'rule-tests-'))
  try {
    const size = Math.ceil(document.tests.length / parts)
    const runs = Array.from({ length: Math.ceil(document.tests.length / size) }, (_, index) => {
      const part = join(directory, `part-${index}.yml`)
      const ruleFiles = document.rule_files.map((ruleFile) => resolve(dirname(path), ruleFile))
      writeFileSync(part, stringify({ ...document, rule_files: ruleFiles, tests: document.tests.slice(index * size, (index + 1) * size) }))
      return promtool(['test', 'rules', part])
    })
    const results = await Promise.all(runs)
    return { code: results.find(({ code }) => code !== 0)?.code ?? 0, output: results.map(({ output }) => output).join('\n') }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}

export interface Sample { name: string, labels: Record<string, string>, value: number }
export interface Exposition { help: Map<string, string>, types: Map<string, string>, samples: Sample[] }

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y

function parseLabels (text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {}
  LABEL.lastIndex = 0
  while (LABEL.lastIndex < text.length) {
    const match = LABEL.exec(text)
    if (match === null) throw new Error(`bad labels in: ${line}`)
    labels[match[1]!] = match[2]!.replace(/\\(.)/g, (_, escaped: string) => (escaped === 'n' ? '\n' : escaped))
  }
  return labels
}

function parseValue (text: string, line: string): number {
  // As Prometheus reads them (Go's ParseFloat): prom-client writes NaN as `Nan`.
  if (/^\+?inf$/i.test(text)) return Infinity
  if (/^-inf$/i.test(text)) return -Infinity
  if (/^nan$/i.test(text)) return NaN
  const value = Number(text)
  if (text === '' || Number.isNaN(value)) throw new Error(`bad value in: ${line}`)
  return value
}

/**
 * A strict reader of the Prometheus text format (0.0.4): throws on the first line that is not. The
 * npm parsers drop a histogram's labels or accept what Prometheus refuses (decision 0119).
 */
export function parseExposition (text: string): Exposition {
  const exposition: Exposition = { help: new Map(), types: new Map(), samples: [] }
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue
    const comment = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line)
    if (comment !== null) {
      const [, kind, name, rest] = comment as unknown as [string, string, string, string]
      if (!NAME.test(name)) throw new Error(`bad metric name in: ${line}`)
      if (kind === 'TYPE' && !['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) throw new Error(`bad type in: ${line}`)
      exposition[kind === 'HELP' ? 'help' : 'types'].set(name, rest)
      continue
    }
    if (line.startsWith('#')) continue
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line)
    if (sample === null) throw new Error(`not a sample: ${line}`)
    const [, name, labels, value] = sample as unknown as [string, string, string | undefined, string]
    exposition.samples.push({ name, labels: labels === undefined ? {} : parseLabels(labels, line), value: parseValue(value, line) })
  }
  return exposition
}

/** The type of the family a sample belongs to (a histogram's `_bucket`, `_count` and `_sum` included). */
export function typeOf (exposition: Exposition, name: string): string | undefined {
  return exposition.types.get(name) ?? exposition.types.get(name.replace(/_(bucket|count|sum)$/, ''))
}

/**
 * A scrape of /metrics as promtool input series, as if the service had kept going at the same pace:
 * a gauge keeps its value; a counter grows by a fifth of its value every minute, so that 5 minutes
 * hold as many samples as the scrape counts (what a minimum of samples is judged on), and every
 * rate, ratio and histogram percentile over them equals the one of the scrape. `volume` multiplies
 * the counters: the same shares and percentiles, of that many times the samples.
 */
export function scrapedSeries (exposition: Exposition, prefix = 'portal_bff_', volume = 1): InputSeries[] {
  const series: InputSeries[] = []
  for (const { name, labels, value } of exposition.samples) {
    if (!name.startsWith(prefix) || name.endsWith('_sum') || !Number.isFinite(value) || /e/i.test(String(value))) continue
    const cumulative = ['counter', 'histogram'].includes(typeOf(exposition, name) ?? '')
    const all = { ...labels, job: 'portal-bff', instance: 'portal-bff:3000' }
    series.push({
      series: `${name}{${Object.entries(all).map(([label, labelValue]) => `${label}=${JSON.stringify(labelValue)}`).join(',')}}`,
      values: cumulative ? increasing(volume * value / 5) : constant(value)
    })
  }
  return series
}

/**
 * Whether the shipped rules, fed a scrape of /metrics (at `volume` times its counts), fire exactly the
 * alerts of `level` for the measure (none, the warning, or the warning and the critical).
 */
export async function promtoolAgrees (metricsText: string, measure: MeasureName, level: Level, volume = 1): Promise<PromtoolResult & { agrees: boolean }> {
  const row = threshold(measure)
  const directory = mkdtempSync(join(tmpdir(), 'portal-bff-promtool-'))
  try {
    const tests = renderRuleTests([{ name: `${measure} at ${level}, from a scrape`, series: scrapedSeries(parseExposition(metricsText), 'portal_bff_', volume), alertname: alertName(row), level, row }], join(projectRoot, RULES_FILE))
    writeFileSync(join(directory, 'scrape.test.yml'), tests)
    const result = await promtool(['test', 'rules', 'scrape.test.yml'], { cwd: directory })
    return { ...result, agrees: result.code === 0 }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}

export interface AlertRow { measure: string, level: Level, value: number | null, crossed: Level | null, priority: string | null, note?: string }

export interface LevelCheck {
  /** The row of GET /health/alerts. */
  alert: AlertRow
  /** The shipped rules fed a scrape of /metrics taken right after; undefined when promtool is not installed. */
  promtool: (PromtoolResult & { agrees: boolean }) | undefined
}

/** What the rules are expected to fire, when it is not the level of /health/alerts. */
export interface RuleExpectation {
  /** The alerts the rules fire (a cost row below its volume fires none). */
  level?: Level
  /** The scrape's counts fed to promtool this many times over. */
  volume?: number
}

/**
 * The level of a measure as /health/alerts judges it, and whether the Prometheus rules, fed the
 * service's /metrics at that moment, fire the alerts of `expected` (or of `rules.level`).
 */
export async function checkLevel (inject: (url: string) => Promise<{ body: string }>, measure: MeasureName, expected: Level, rules: RuleExpectation = {}): Promise<LevelCheck> {
  const report = JSON.parse((await inject('/health/alerts')).body) as { alerts: AlertRow[] }
  const alert = report.alerts.find((row) => row.measure === measure)
  if (alert === undefined) throw new Error(`/health/alerts has no ${measure} row`)
  const metrics = (await inject('/metrics')).body
  return { alert, promtool: findPromtool() === undefined ? undefined : await promtoolAgrees(metrics, measure, rules.level ?? expected, rules.volume) }
}

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { DASHBOARD_FILE, RULES_FILE, RULE_TESTS_FILE, checkedRunbookBase, renderAlertRuleTests, renderAlertRules, renderDashboard } from './alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'

/**
 * Writes the Prometheus rules, their promtool tests and the Grafana dashboard from plugins/app/monitoring/thresholds.ts.
 * With --check it writes nothing and exits 1 when a checked-in file differs from what it would write.
 * With --print it writes the rules alone to stdout, their `runbook_url` under `--runbook-base-url=<url>`
 * when given (where the deployment's operators open the runbooks), for an operator's Prometheus.
 */
export function generatedFiles (): Array<{ path: string, content: string }> {
  return [
    { path: RULES_FILE, content: renderAlertRules() },
    { path: RULE_TESTS_FILE, content: renderAlertRuleTests() },
    { path: DASHBOARD_FILE, content: renderDashboard() }
  ]
}

function current (path: string): string | undefined {
  try {
    return readFileSync(join(projectRoot, path), 'utf8')
  } catch {
    return undefined
  }
}

/** The generated files whose checked-in copy is missing or different. */
export function outOfDate (): string[] {
  return generatedFiles().filter(({ path, content }) => current(path) !== content).map(({ path }) => path)
}

function main (args: string[]): number {
  if (args.includes('--print')) {
    const base = args.find((arg) => arg.startsWith('--runbook-base-url='))?.slice('--runbook-base-url='.length)
    process.stdout.write(renderAlertRules(base === undefined ? undefined : checkedRunbookBase(base, '--runbook-base-url')))
    return 0
  }
  if (args.includes('--check')) {
    const stale = outOfDate()
    for (const path of stale) process.stderr.write(`${path} is out of date: run npm run monitoring:generate\n`)
    return stale.length === 0 ? 0 : 1
  }
  for (const { path, content } of generatedFiles()) {
    mkdirSync(dirname(join(projectRoot, path)), { recursive: true })
    writeFileSync(join(projectRoot, path), content)
    process.stdout.write(`wrote ${path}\n`)
  }
  return 0
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2))
}

import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { readRulesFile, yamlText } from '../../dev/scripts/alert-rules.js'
import { projectRoot } from '../../lib/project-root.js'
import { tempDir } from './made.js'
import { findProgram } from './packages.js'
import { freePort } from './ports.js'
import { exited, waitFor } from './processes.js'

/** A child process of a test, ended by PID: SIGTERM, then SIGKILL after 5 s. */
async function end (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill('SIGTERM')
  await Promise.race([exited(child), sleep(5000)])
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
}

/**
 * A rules file with every rule's `for:`, and each of `windows` in its expressions (`1m` for `[1m]`),
 * changed by `shorter`: read and written as YAML, nothing else changed.
 */
export function rulesWithShorterDurations (text: string, shorter: (duration: string) => string, windows: readonly string[] = []): string {
  const file = readRulesFile(text)
  for (const rule of file.groups.flatMap((group) => group.rules)) {
    if (rule.for !== undefined) rule.for = shorter(rule.for)
    for (const window of windows) {
      if (!text.includes(`[${window}]`)) throw new Error(`the rules no longer use [${window}]`)
      rule.expr = rule.expr.replaceAll(`[${window}]`, `[${shorter(window)}]`)
    }
  }
  return yamlText(file)
}

export interface AlertmanagerAlert { fingerprint: string, labels: Record<string, string>, status: { state: string, inhibitedBy: string[] } }

export const ALERTMANAGER_CONFIG = 'deploy/monitoring/alertmanager/alertmanager.yml'

/** The receivers an operator sets before the first start, by the variable docs/operations.md names. */
export interface ReceiverUrls { PAGER_URL: string, TICKETS_URL: string, DEFAULT_URL: string, WATCHDOG_URL: string }

/** The command docs/operations.md gives to set the receivers, writing to stdout instead of /etc. */
export function documentedReceiversCommand (): string {
  const operations = readFileSync(join(projectRoot, 'docs/operations.md'), 'utf8')
  const command = /^ *(sed -e "s\|unset-pager:.*) > \/etc\/prometheus\/alertmanager\.yml$/m.exec(operations)?.[1]
  if (command === undefined) throw new Error('docs/operations.md no longer gives the command that sets the receivers')
  return command
}

/** The shipped Alertmanager configuration with the receivers set as docs/operations.md says, by running its command. */
export function operatorAlertmanagerConfig (urls: ReceiverUrls): string {
  const result = spawnSync('/bin/sh', ['-c', documentedReceiversCommand()], { cwd: projectRoot, encoding: 'utf8', env: { ...process.env, ...urls } })
  if (result.status !== 0) throw new Error(`the documented command failed: ${result.stderr}`)
  return result.stdout
}

/** Every receiver posting to one webhook receiver, under its name: /pager, /tickets, /default, /watchdog. */
export function receiversAt (address: string): ReceiverUrls {
  return { PAGER_URL: `http://${address}/pager`, TICKETS_URL: `http://${address}/tickets`, DEFAULT_URL: `http://${address}/default`, WATCHDOG_URL: `http://${address}/watchdog` }
}

/**
 * A real Alertmanager of the test's own with the shipped configuration (deploy/monitoring/alertmanager/alertmanager.yml)
 * and its receivers set as docs/operations.md says, to `receiver` (by default an address nothing
 * listens on, for a test that reads Alertmanager's alerts and no notification), or the given text
 * of a configuration; ended by PID.
 */
export class AlertmanagerServer {
  private constructor (readonly url: string, private readonly child: ChildProcess, private readonly directory: string) {}

  static async start ({ config, receiver = '127.0.0.1:9' }: { config?: string, receiver?: string } = {}): Promise<AlertmanagerServer> {
    const executable = findProgram('prometheus-alertmanager')
    if (executable === undefined) throw new Error('Alertmanager is not installed (Debian package prometheus-alertmanager)')
    const directory = tempDir('alertmanager')
    const configFile = join(directory, 'alertmanager.yml')
    writeFileSync(configFile, config ?? operatorAlertmanagerConfig(receiversAt(receiver)))
    const port = await freePort()
    const child = spawn(executable, [
      `--config.file=${configFile}`,
      `--storage.path=${directory}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--cluster.listen-address=',
      '--log.level=warn'
    ], { stdio: ['ignore', 'ignore', 'pipe'] })
    let log = ''
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { log += chunk })
    const server = new AlertmanagerServer(`http://127.0.0.1:${port}`, child, directory)
    try {
      await waitFor('Alertmanager ready', async () => child.exitCode === null && (await fetch(`${server.url}/-/ready`)).ok, 30_000)
    } catch (error) {
      await server.stop()
      throw new Error(`${(error as Error).message}: ${log}`)
    }
    return server
  }

  get address (): string {
    return new URL(this.url).host
  }

  /** Every alert it holds, active, inhibited or silenced. */
  async alerts (query = ''): Promise<AlertmanagerAlert[]> {
    return await (await fetch(`${this.url}/api/v2/alerts${query}`)).json() as AlertmanagerAlert[]
  }

  async stop (): Promise<void> {
    await end(this.child)
    rmSync(this.directory, { recursive: true, force: true })
  }
}

export interface Target { address: string, labels?: Record<string, string> }

export interface PrometheusAlert { labels: Record<string, string>, state: 'pending' | 'firing', activeAt: string }

export interface PrometheusExemplar { seriesLabels: Record<string, string>, labels: Record<string, string>, value: string, timestamp: number }

/** The flags the shipped deploy/monitoring/prometheus/prometheus.default gives Prometheus (its ARGS). */
export function shippedPrometheusFlags (): string[] {
  const defaults = readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/prometheus.default'), 'utf8')
  const args = /^ARGS="([^"]*)"$/m.exec(defaults)?.[1]
  if (args === undefined) throw new Error('prometheus.default sets no ARGS')
  return args.split(/\s+/).filter((flag) => flag !== '')
}

/**
 * A real Prometheus server of the test's own on a loopback port: with the shipped rules
 * (deploy/monitoring/prometheus/alerts.yml), scraping the given targets as job `portal-bff` and sending
 * its alerts to `alertmanager` when given (`start`), or on files of the test's (`withFiles`); with the
 * shipped flags (prometheus.default), ended by PID.
 */
export class PrometheusServer {
  private constructor (readonly url: string, private readonly child: ChildProcess, private readonly directory: string, private readonly log: () => string) {}

  static async start ({ targets, intervalSeconds = 1, alertmanager }: { targets: Target[], intervalSeconds?: number, alertmanager?: string }): Promise<PrometheusServer> {
    const staticConfigs = targets.map(({ address, labels = {} }) =>
      `      - targets: ['${address}']${Object.keys(labels).length === 0 ? '' : `\n        labels: ${JSON.stringify(labels)}`}`)
    return await PrometheusServer.withFiles({
      'alerts.yml': readFileSync(join(projectRoot, 'deploy/monitoring/prometheus/alerts.yml'), 'utf8'),
      'prometheus.yml': [
        'global:',
        `  scrape_interval: ${intervalSeconds}s`,
        `  scrape_timeout: ${intervalSeconds}s`,
        `  evaluation_interval: ${intervalSeconds}s`,
        'rule_files: [alerts.yml]',
        ...(alertmanager === undefined ? [] : ['alerting:', '  alertmanagers:', `    - static_configs: [{ targets: ['${alertmanager}'] }]`]),
        'scrape_configs:',
        '  - job_name: portal-bff',
        '    static_configs:',
        ...staticConfigs
      ].join('\n')
    })
  }

  /** A Prometheus server run on the given files (`prometheus.yml` and what it names), written in a directory of its own. */
  static async withFiles (files: Record<string, string>): Promise<PrometheusServer> {
    const executable = findProgram('prometheus')
    if (executable === undefined) throw new Error('prometheus is not installed (Debian package prometheus)')
    const directory = tempDir('prometheus')
    for (const [name, content] of Object.entries(files)) writeFileSync(join(directory, name), content, { mode: 0o600 })
    const port = await freePort()
    const child = spawn(executable, [
      `--config.file=${join(directory, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(directory, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
      ...shippedPrometheusFlags()
    ], { stdio: ['ignore', 'ignore', 'pipe'] })
    let log = ''
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { log += chunk })
    const server = new PrometheusServer(`http://127.0.0.1:${port}`, child, directory, () => log)
    try {
      await waitFor('Prometheus ready', async () => child.exitCode === null && (await fetch(`${server.url}/-/ready`)).ok, 30_000)
    } catch (error) {
      await server.stop()
      throw new Error(`${(error as Error).message}: ${log}`)
    }
    return server
  }

  /** The alerts pending or firing now. */
  async alerts (): Promise<PrometheusAlert[]> {
    const response = await fetch(`${this.url}/api/v1/alerts`)
    const body = await response.json() as { data: { alerts: PrometheusAlert[] } }
    return body.data.alerts
  }

  /** An instant query's result. */
  async query (promql: string): Promise<Array<{ metric: Record<string, string>, value: [number, string] }>> {
    const response = await fetch(`${this.url}/api/v1/query?query=${encodeURIComponent(promql)}`)
    const body = await response.json() as { status: string, error?: string, data: { result: Array<{ metric: Record<string, string>, value: [number, string] }> } }
    if (body.status !== 'success') throw new Error(`query ${promql}: ${body.error ?? 'failed'}`)
    return body.data.result
  }

  /** The exemplars kept of the series `selector` names, over the last hour. */
  async exemplars (selector: string): Promise<PrometheusExemplar[]> {
    const end = Date.now() / 1000
    const response = await fetch(`${this.url}/api/v1/query_exemplars?query=${encodeURIComponent(selector)}&start=${end - 3600}&end=${end}`)
    const body = await response.json() as { status: string, error?: string, data: Array<{ seriesLabels: Record<string, string>, exemplars: Array<Omit<PrometheusExemplar, 'seriesLabels'>> }> }
    if (body.status !== 'success') throw new Error(`exemplars of ${selector}: ${body.error ?? 'failed'}`)
    return body.data.flatMap(({ seriesLabels, exemplars }) => exemplars.map((exemplar) => ({ seriesLabels, ...exemplar })))
  }

  /** The scrape targets' health, and the last scrape's error. */
  async targets (): Promise<Array<{ scrapeUrl: string, health: string, lastError: string }>> {
    const body = await (await fetch(`${this.url}/api/v1/targets`)).json() as { data: { activeTargets: Array<{ scrapeUrl: string, health: string, lastError: string }> } }
    return body.data.activeTargets
  }

  stderr (): string {
    return this.log()
  }

  async stop (): Promise<void> {
    await end(this.child)
    rmSync(this.directory, { recursive: true, force: true })
  }
}

export interface Notification {
  /** The receiver's path: /pager, /tickets, /default or /watchdog (receiversAt). */
  path: string
  /** When it arrived (performance.now()). */
  at: number
  body: { status: 'firing' | 'resolved', groupLabels: Record<string, string>, alerts: Array<{ status: 'firing' | 'resolved', labels: Record<string, string>, annotations: Record<string, string> }> }
}

/**
 * An HTTP server that takes Alertmanager's webhook notifications and keeps them, in order; closed
 * by the test. The Watchdog's, every minute whatever happens, are kept apart (`watchdog`).
 */
export class WebhookReceiver {
  private constructor (private readonly server: Server, readonly notifications: Notification[], readonly watchdog: Notification[]) {}

  static async start (): Promise<WebhookReceiver> {
    const notifications: Notification[] = []
    const watchdog: Notification[] = []
    const server = createServer((request, response) => {
      let text = ''
      request.setEncoding('utf8').on('data', (chunk: string) => { text += chunk })
      request.on('end', () => {
        const path = request.url ?? ''
        ;(path === '/watchdog' ? watchdog : notifications).push({ path, at: performance.now(), body: JSON.parse(text) as Notification['body'] })
        response.writeHead(200).end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return new WebhookReceiver(server, notifications, watchdog)
  }

  get address (): string {
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  async stop (): Promise<void> {
    this.server.closeAllConnections()
    await new Promise((resolve) => this.server.close(resolve))
  }
}

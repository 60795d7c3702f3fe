import { spawn, type ChildProcess } from 'node:child_process'
import { copyFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
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

export interface AlertmanagerAlert { fingerprint: string, labels: Record<string, string>, status: { state: string, inhibitedBy: string[] } }

/** A real Alertmanager of the test's own with the shipped configuration (deploy/monitoring/alertmanager/alertmanager.yml); ended by PID. */
export class AlertmanagerServer {
  private constructor (readonly url: string, private readonly child: ChildProcess, private readonly directory: string) {}

  static async start (): Promise<AlertmanagerServer> {
    const executable = findProgram('prometheus-alertmanager')
    if (executable === undefined) throw new Error('Alertmanager is not installed (Debian package prometheus-alertmanager)')
    const directory = tempDir('alertmanager')
    const port = await freePort()
    const child = spawn(executable, [
      `--config.file=${join(projectRoot, 'deploy/monitoring/alertmanager/alertmanager.yml')}`,
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

/**
 * A real Prometheus server of the test's own on a loopback port, with the shipped rules
 * (deploy/monitoring/prometheus/alerts.yml), scraping the given targets as job `portal-bff` and sending
 * its alerts to `alertmanager` when given; ended by PID.
 */
export class PrometheusServer {
  private constructor (readonly url: string, private readonly child: ChildProcess, private readonly directory: string, private readonly log: () => string) {}

  static async start ({ targets, intervalSeconds = 1, alertmanager }: { targets: Target[], intervalSeconds?: number, alertmanager?: string }): Promise<PrometheusServer> {
    const executable = findProgram('prometheus')
    if (executable === undefined) throw new Error('prometheus is not installed (Debian package prometheus)')
    const directory = tempDir('prometheus')
    copyFileSync(join(projectRoot, 'deploy/monitoring/prometheus/alerts.yml'), join(directory, 'alerts.yml'))
    const staticConfigs = targets.map(({ address, labels = {} }) =>
      `      - targets: ['${address}']${Object.keys(labels).length === 0 ? '' : `\n        labels: ${JSON.stringify(labels)}`}`)
    writeFileSync(join(directory, 'prometheus.yml'), [
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
    ].join('\n'))
    const port = await freePort()
    const child = spawn(executable, [
      `--config.file=${join(directory, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(directory, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn'
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

  stderr (): string {
    return this.log()
  }

  async stop (): Promise<void> {
    await end(this.child)
    rmSync(this.directory, { recursive: true, force: true })
  }
}

import { spawn, spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { projectRoot } from '../../lib/project-root.js'
import { findProgram } from './packages.js'
import { freePort } from './ports.js'
import { exited, waitFor } from './processes.js'
import { tempDir } from './made.js'

interface Teardown { teardown (fn: () => unknown): void }

export const HAPROXY_CONFIG = join(projectRoot, 'deploy', 'haproxy', 'haproxy.cfg')
const HAPROXY = findProgram('haproxy') ?? 'haproxy'

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** An HAProxy time (`1s`, `250ms`, `2000`: milliseconds without a unit) in milliseconds. */
export function haproxyTimeMs (value: string): number {
  const match = /^(\d+)(us|ms|s|m|h|d)?$/.exec(value)
  if (match === null) throw new Error(`not an HAProxy time: ${value}`)
  return Number(match[1]) * UNIT_MS[match[2] ?? 'ms']!
}

export interface HaproxyServer { name: string, host: string, port: number }

/** The settings of a configuration that the service's shutdown and routes must agree with. */
export interface HaproxySettings {
  balance: string | undefined
  checkMethod: string | undefined
  checkPath: string | undefined
  expectStatus: number | undefined
  forwardFor: boolean
  interMs: number
  fall: number
  rise: number
  timeoutServerMs: number | undefined
  servers: HaproxyServer[]
}

/** The significant lines: comments and blank lines dropped, indentation kept out. */
function statements (config: string): string[] {
  return config.split('\n').map((line) => line.replace(/(^|\s)#.*$/, '').trim()).filter((line) => line !== '')
}

/** A keyword's argument on a `server` or `default-server` line. */
function argument (words: string[], keyword: string): string | undefined {
  const at = words.indexOf(keyword)
  return at === -1 ? undefined : words[at + 1]
}

export function haproxySettings (config: string): HaproxySettings {
  const lines = statements(config).map((line) => line.split(/\s+/))
  const find = (...prefix: string[]) => lines.find((words) => prefix.every((word, index) => words[index] === word))
  const defaults = find('default-server') ?? []
  const [, , checkMethod, checkPath] = find('option', 'httpchk') ?? []
  const timeoutServer = find('timeout', 'server')?.[2]
  // HAProxy's own defaults where a setting is not given: inter 2s, fall 3, rise 2.
  return {
    balance: find('balance')?.[1],
    checkMethod,
    checkPath,
    expectStatus: Number(find('http-check', 'expect', 'status')?.[3]) || undefined,
    forwardFor: find('option', 'forwardfor') !== undefined,
    interMs: haproxyTimeMs(argument(defaults, 'inter') ?? '2s'),
    fall: Number(argument(defaults, 'fall') ?? 3),
    rise: Number(argument(defaults, 'rise') ?? 2),
    timeoutServerMs: timeoutServer === undefined ? undefined : haproxyTimeMs(timeoutServer),
    servers: lines.filter((words) => words[0] === 'server').map(([, name, address]) => {
      const colon = address!.lastIndexOf(':')
      return { name: name!, host: address!.slice(0, colon), port: Number(address!.slice(colon + 1)) }
    })
  }
}

/** `haproxy -c`: whether HAProxy takes the configuration, and what it said. */
export function checkHaproxyConfig (path: string): { status: number | null, output: string } {
  const { status, stdout, stderr } = spawnSync(HAPROXY, ['-c', '-f', path], { encoding: 'utf8' })
  return { status, output: `${stdout}${stderr}` }
}

export interface RenderOptions {
  bindPort: number
  /** Loopback ports of the instances, in place of the configuration's servers. */
  serverPorts: number[]
  /** A shorter check interval, so that a test need not wait seconds for each state change. */
  interMs: number
}

/**
 * deploy/haproxy/haproxy.cfg with the test's listener, instances and check interval, and only the
 * requests that were retried, redispatched or failed in its log; every other setting as shipped.
 */
export function renderHaproxyConfig (config: string, { bindPort, serverPorts, interMs }: RenderOptions): string {
  const lines: string[] = []
  let serversWritten = false
  for (const line of config.split('\n')) {
    const words = line.trim().split(/\s+/)
    if (words[0] === 'bind') {
      lines.push(`    bind 127.0.0.1:${bindPort}`, '    option dontlog-normal')
    } else if (words[0] === 'default-server') {
      lines.push(line.replace(/\binter \S+/, `inter ${interMs}ms`))
    } else if (words[0] === 'server') {
      if (!serversWritten) lines.push(...serverPorts.map((port, index) => `    server bff${index + 1} 127.0.0.1:${port}`))
      serversWritten = true
    } else {
      lines.push(line)
    }
  }
  return lines.join('\n')
}

export interface HaproxyProcess {
  url: string
  pid: number
  /** Every line HAProxy logged: server state changes, and requests retried, redispatched or failed. */
  lines: Array<{ at: number, text: string }>
}

/** Runs HAProxy in the foreground on a configuration of the test's own; killed by PID at teardown. */
export async function startHaproxy (t: Teardown, render: (bindPort: number) => string): Promise<HaproxyProcess> {
  const bindPort = await freePort()
  const path = join(tempDir('haproxy'), 'haproxy.cfg')
  writeFileSync(path, render(bindPort))
  const child = spawn(HAPROXY, ['-db', '-f', path], { stdio: ['ignore', 'pipe', 'pipe'] })
  const exit = exited(child)
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exit
  })
  const lines: HaproxyProcess['lines'] = []
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on('line', (text) => lines.push({ at: performance.now(), text }))
  }
  const url = `http://127.0.0.1:${bindPort}`
  await waitFor('HAProxy to listen', async () => {
    if (child.exitCode !== null) throw new Error(`haproxy exited: ${lines.map((line) => line.text).join('\n')}`)
    return (await fetch(`${url}/health/live`)).ok
  }, 10_000)
  return { url, pid: child.pid!, lines }
}

/**
 * The shipped configuration (deploy/haproxy/haproxy.cfg) in front of instances on these loopback
 * ports, checking them every `interMs`: what a test of the deployment runs. Its settings come along,
 * for a test that must agree with them.
 */
export async function startShippedHaproxy (t: Teardown, { serverPorts, interMs }: Omit<RenderOptions, 'bindPort'>): Promise<HaproxyProcess & { settings: HaproxySettings }> {
  const shipped = readFileSync(HAPROXY_CONFIG, 'utf8')
  const haproxy = await startHaproxy(t, (bindPort) => renderHaproxyConfig(shipped, { bindPort, serverPorts, interMs }))
  return { ...haproxy, settings: haproxySettings(shipped) }
}

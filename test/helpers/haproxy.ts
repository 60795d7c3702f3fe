import { spawn, spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { Agent, request } from 'undici'
import { projectRoot } from '../../lib/project-root.js'
import { findProgram } from './packages.js'
import { freePort } from './ports.js'
import { exited, waitFor } from './processes.js'
import { tempDir } from './made.js'
import { selfSignedCertificate, type TestCertificate } from './tls.js'

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
  /** The `crt` of the TLS listener, as written. */
  tlsCertificate: string | undefined
  /** Whether a request over plain HTTP is redirected to HTTPS. */
  redirectsToHttps: boolean
  /** The request headers set for the service: `http-request set-header`, name (lower case) to value. */
  setHeaders: Record<string, string>
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
    tlsCertificate: lines.filter((words) => words[0] === 'bind' && words.includes('ssl')).map((words) => argument(words, 'crt'))[0],
    redirectsToHttps: find('http-request', 'redirect', 'scheme', 'https')?.slice(-4).join(' ') === 'unless { ssl_fc }',
    setHeaders: Object.fromEntries(lines.filter((words) => words[0] === 'http-request' && words[1] === 'set-header').map((words) => [words[2]!.toLowerCase(), words.slice(3).join(' ')])),
    servers: lines.filter((words) => words[0] === 'server').map(([, name, address]) => {
      const colon = address!.lastIndexOf(':')
      return { name: name!, host: address!.slice(0, colon), port: Number(address!.slice(colon + 1)) }
    })
  }
}

/** The environment of HAProxy on the shipped configuration: the TLS certificate it reads. */
function haproxyEnv (certificate: TestCertificate): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, HAPROXY_TLS_CERT: certificate.pemPath }
}

/** `haproxy -c` with a certificate to read: whether HAProxy takes the configuration, and what it said. */
export function checkHaproxyConfig (path: string, certificate: TestCertificate): { status: number | null, output: string } {
  const { status, stdout, stderr } = spawnSync(HAPROXY, ['-c', '-f', path], { encoding: 'utf8', env: haproxyEnv(certificate) })
  return { status, output: `${stdout}${stderr}` }
}

/** The test's listeners, in place of the configuration's: TLS, and plain HTTP (which redirects). */
export interface HaproxyPorts { https: number, http: number }

export interface RenderOptions {
  ports: HaproxyPorts
  /** Loopback ports of the instances, in place of the configuration's servers. */
  serverPorts: number[]
  /** A shorter check interval, so that a test need not wait seconds for each state change. */
  interMs: number
}

/**
 * deploy/haproxy/haproxy.cfg with the test's listeners (on loopback, TLS and its certificate as
 * shipped), instances and check interval, and only the requests that were retried, redispatched or
 * failed in its log; every other setting as shipped.
 */
export function renderHaproxyConfig (config: string, { ports, serverPorts, interMs }: RenderOptions): string {
  const lines: string[] = []
  let serversWritten = false
  for (const line of config.split('\n')) {
    const words = line.trim().split(/\s+/)
    if (words[0] === 'bind') {
      const port = words.includes('ssl') ? ports.https : ports.http
      lines.push(line.replace(/\bbind \S+/, `bind 127.0.0.1:${port}`))
      if (port === ports.http) lines.push('    option dontlog-normal')
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
  /** https://127.0.0.1:<port>, the TLS listener. */
  url: string
  /** http://127.0.0.1:<port>, which redirects. */
  httpUrl: string
  ports: HaproxyPorts
  /** An undici dispatcher that trusts the test's certificate. */
  dispatcher: Agent
  pid: number
  /** Every line HAProxy logged: server state changes, and requests retried, redispatched or failed. */
  lines: Array<{ at: number, text: string }>
}

/** Free ports for HAProxy's listeners, for a test that must name them before HAProxy starts. */
export async function haproxyPorts (): Promise<HaproxyPorts> {
  return { https: await freePort(), http: await freePort() }
}

/** Runs HAProxy in the foreground on a configuration of the test's own, with the certificate; killed by PID at teardown. */
export async function startHaproxy (t: Teardown, certificate: TestCertificate, render: (ports: HaproxyPorts) => string, ports?: HaproxyPorts): Promise<HaproxyProcess> {
  ports ??= await haproxyPorts()
  const path = join(tempDir('haproxy'), 'haproxy.cfg')
  // HAProxy refuses a last line without its line feed.
  writeFileSync(path, render(ports).replace(/\n?$/, '\n'))
  const child = spawn(HAPROXY, ['-db', '-f', path], { stdio: ['ignore', 'pipe', 'pipe'], env: haproxyEnv(certificate) })
  const exit = exited(child)
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exit
  })
  const lines: HaproxyProcess['lines'] = []
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on('line', (text) => lines.push({ at: performance.now(), text }))
  }
  const dispatcher = new Agent({ connect: { ca: certificate.ca } })
  t.teardown(() => dispatcher.close())
  const url = `https://127.0.0.1:${ports.https}`
  let failure: unknown
  await waitFor('HAProxy to listen', async () => {
    if (child.exitCode !== null) return false
    const live = await request(`${url}/health/live`, { dispatcher }).catch((error: unknown) => { failure = error })
    await live?.body.dump()
    return live?.statusCode === 200
  }, 10_000).catch((error: unknown) => {
    throw new Error(`${String(error)} (haproxy ${child.exitCode === null ? 'running' : `exited ${child.exitCode}`}; last failure: ${String(failure)}): ${lines.map((line) => line.text).join('\n')}`)
  })
  return { url, httpUrl: `http://127.0.0.1:${ports.http}`, ports, dispatcher, pid: child.pid!, lines }
}

/**
 * The shipped configuration (deploy/haproxy/haproxy.cfg) in front of instances on these loopback
 * ports, checking them every `interMs`: what a test of the deployment runs. Its settings come along,
 * for a test that must agree with them.
 */
export async function startShippedHaproxy (t: Teardown, { serverPorts, interMs }: Omit<RenderOptions, 'ports'>): Promise<HaproxyProcess & { settings: HaproxySettings }> {
  const shipped = readFileSync(HAPROXY_CONFIG, 'utf8')
  const haproxy = await startHaproxy(t, selfSignedCertificate(), (ports) => renderHaproxyConfig(shipped, { ports, serverPorts, interMs }))
  return { ...haproxy, settings: haproxySettings(shipped) }
}

import { randomUUID } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { createServer, type AddressInfo } from 'node:net'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import pg from 'pg'
import { projectRoot } from '../../lib/project-root.js'
import { lastOutput, runServer, startService, type RunOptions, type ServiceProcess } from '../tools/service-process.js'

export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100)
export const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
export const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
/**
 * The load before a cached read's measure, in seconds: a fresh process compiles its hot code in
 * its first seconds, on V8's worker threads, which a measure from the second second counts as the
 * requests' CPU (the service's worker threads: 41 µs a request from the 2nd to the 7th second, 17-19
 * from the 10th; more code, as tracing's, more so). A service runs for days: the steady state is its cost.
 */
export const STEADY_WARM_UP_SECONDS = Number(process.env.BENCH_WARM_UP_SECONDS ?? 10)
export const POSTGRES = { host: '127.0.0.1', port: 5432 }
/** The database of the suites that start the service as its own process. */
export const DATABASE = 'portal_bff_bench'
export const DATABASE_URL = `postgres://postgres@${POSTGRES.host}:${POSTGRES.port}/${DATABASE}`
export const REDIS_URL = 'redis://127.0.0.1:6379'
/** The Node.js binary that runs BENCH_ALT_BUILD's target (another runtime measured in the same rounds); this one when unset. */
export const ALT_NODE = process.env.BENCH_ALT_NODE
/** BENCH_ALT_ENV=NAME=value,...: settings of the alt target only (another build's own database, say). */
export function altEnv (variable = 'BENCH_ALT_ENV'): Record<string, string> {
  return Object.fromEntries((process.env[variable] ?? '').split(',').filter((setting) => setting !== '').map((setting) => {
    const [name, ...value] = setting.split('=')
    return [name!, value.join('=')]
  }))
}

/** `latencyP99Ms`: autocannon's 99th percentile of the response times of the run. */
export interface Measure { requests: number, seconds: number, failures: number, latencyP99Ms: number }

/** One autocannon run; failures are non-2xx answers and socket errors or timeouts. */
export async function load (options: autocannon.Options): Promise<Measure> {
  const result = await autocannon({ connections: CONNECTIONS, duration: SECONDS, ...options })
  return { requests: result.requests.total, seconds: result.duration, failures: result.non2xx + result.errors, latencyP99Ms: result.latency.p99 }
}

/** Requests per second over several measures. */
export function rate (measures: Measure[]): number {
  const requests = measures.reduce((sum, measure) => sum + measure.requests, 0)
  const seconds = measures.reduce((sum, measure) => sum + measure.seconds, 0)
  return requests / seconds
}

export function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

export function failures (measures: Measure[]): number {
  return measures.reduce((sum, measure) => sum + measure.failures, 0)
}

export async function ensureDatabase (): Promise<void> {
  const client = new pg.Client({ ...POSTGRES, user: 'postgres', database: 'postgres' })
  await client.connect()
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE])
    if (rowCount === 0) await client.query(`CREATE DATABASE ${DATABASE}`)
  } finally {
    await client.end()
  }
}

/** The service's environment in the process suites: outside production, so it embeds the upstream sandbox. */
export function serviceEnv (settings: Record<string, string>): Record<string, string> {
  return {
    NODE_ENV: 'production-like',
    REDIS_URL,
    LOG_DIR: join(projectRoot, 'logs', 'bench'),
    JWT_SECRET: 'bench-secret-that-is-at-least-32-chars',
    // No balancer to wait for between the rounds' stops and starts.
    SHUTDOWN_DELAY_MS: '0',
    ...settings
  }
}

/** A Redis key prefix of this run alone, so a suite neither meets keys of another run nor leaves its own. */
export function runKeyPrefix (suite: string): string {
  return `bench:${suite}:${randomUUID()}:`
}

export async function deleteKeys (prefix: string): Promise<void> {
  const redis = new Redis(REDIS_URL)
  try {
    // scanStream is a Readable of untyped chunks: one batch of key names each.
    for await (const keys of redis.scanStream({ match: `${prefix}*`, count: 1000 }) as AsyncIterable<string[]>) {
      if (keys.length > 0) await redis.unlink(...keys)
    }
  } finally {
    redis.disconnect()
  }
}

/** Peak resident set size (VmHWM) of a running child process, in MB. */
export async function peakRssMb (server: ServiceProcess): Promise<number> {
  const status = await readFile(`/proc/${server.child.pid}/status`, 'utf8')
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024
}

/** CPU time a process has used so far, in µs: user (its own code) and system (the kernel's work for it). */
export interface CpuTime { user: number, system: number }

// /proc/<pid>/stat counts in clock ticks, 100 a second on Linux.
const MICROSECONDS_A_TICK = 10_000

export async function cpuTime (pid: number): Promise<CpuTime> {
  // The fields after the command name, which is in parentheses and may hold spaces.
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ')
  return { user: Number(fields[11]) * MICROSECONDS_A_TICK, system: Number(fields[12]) * MICROSECONDS_A_TICK }
}

/**
 * CPU time of each of a process's threads so far, summed by thread name (`MainThread`, `V8Worker`
 * the garbage collector's and compiler's helpers, `libuv-worker` the pool): where the process's
 * total went, and how much of it was the kernel's work for it.
 */
export async function threadCpuTimes (pid: number): Promise<Map<string, CpuTime>> {
  const times = new Map<string, CpuTime>()
  for (const task of await readdir(`/proc/${pid}/task`)) {
    const stat = await readFile(`/proc/${pid}/task/${task}/stat`, 'utf8').catch(() => undefined)
    if (stat === undefined) continue
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
    const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ')
    const sum = times.get(name) ?? { user: 0, system: 0 }
    times.set(name, {
      user: sum.user + Number(fields[11]) * MICROSECONDS_A_TICK,
      system: sum.system + Number(fields[12]) * MICROSECONDS_A_TICK
    })
  }
  return times
}

/** Resident set size (VmRSS) of a running process now, in bytes. */
export async function rssBytes (pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024
}

/**
 * Starts a server as `startService` does, but reads its output only until it listens, then
 * discards it unparsed: at a log line per request, parsing them would cost the process that runs
 * the load generator its CPU, and the service its measured rate. `lines` holds the lines up to then.
 */
export async function startQuiet (options: RunOptions, timeoutMs = 30_000): Promise<ServiceProcess> {
  const port = options.env.PORT
  if (port !== undefined && port !== '0') return startOnPort(options, port, timeoutMs)
  const { child, exit, stderr } = runServer({ ...options, env: { PORT: '0', ...options.env } })
  const lines: Array<Record<string, unknown>> = []
  const stdout = child.stdout!
  let text = ''
  const recent: string[] = []
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`${options.entry} did not listen within ${timeoutMs} ms; its last output:\n${lastOutput(recent, stderr())}`))
    }, timeoutMs)
    exit.then((code) => reject(new Error(`${options.entry} exited with ${code} before it listened; its last output:\n${lastOutput(recent, stderr())}`)), reject)
    const read = (chunk: Buffer) => {
      text += chunk.toString()
      let end: number
      while ((end = text.indexOf('\n')) !== -1) {
        const line = text.slice(0, end)
        text = text.slice(end + 1)
        recent.push(line)
        try {
          lines.push(JSON.parse(line))
        } catch {
          continue
        }
        const listening = /Server listening at (http:\/\/127\.0\.0\.1:[0-9]+)/.exec(String(lines.at(-1)!.message))
        if (listening?.[1] !== undefined) {
          clearTimeout(timer)
          stdout.off('data', read)
          // Still read, so the pipe never fills and blocks the server's logging.
          stdout.resume()
          resolve(listening[1])
          return
        }
      }
    }
    stdout.on('data', read)
  })
  return { child, url, lines, stderr, exit }
}

/** A port free on 127.0.0.1 now. */
export async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/**
 * The service on a given port, its output discarded from the start, ready once GET /health/live
 * answers: for settings under which it does not log that it listens (LOG_LEVEL=warn).
 */
async function startOnPort (options: RunOptions, port: string, timeoutMs: number): Promise<ServiceProcess> {
  const { child, exit, stderr } = runServer(options)
  child.stdout!.resume()
  const url = `http://127.0.0.1:${port}`
  let exited = false
  exit.then(() => { exited = true }, () => { exited = true })
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (exited) throw new Error(`${options.entry} exited before it answered; its last output:\n${lastOutput([], stderr())}`)
    if (await fetch(`${url}/health/live`).then((response) => response.ok, () => false)) return { child, url, lines: [], stderr, exit }
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`${options.entry} did not answer on ${url} within ${timeoutMs} ms; its last output:\n${lastOutput([], stderr())}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Peak resident set size of the benchmark process since it started, in MB: the in-process suites. */
export function ownPeakRssMb (): number {
  return process.resourceUsage().maxRSS / 1024
}

/** Stops a server started by `withServers` before the end (SIGTERM, and its exit awaited). */
export async function stop ({ child, exit }: ServiceProcess): Promise<void> {
  child.kill('SIGTERM')
  await exit
}

/** Runs `work` with a way to start servers; whatever happens, every server it started is stopped. */
export async function withServers<T> (
  work: (start: (options: RunOptions) => Promise<ServiceProcess>) => Promise<T>,
  starter: (options: RunOptions) => Promise<ServiceProcess> = startService
): Promise<T> {
  const servers: ServiceProcess[] = []
  const start = async (options: RunOptions) => {
    const server = await starter(options)
    servers.push(server)
    return server
  }
  try {
    return await work(start)
  } finally {
    await Promise.all(servers.map(stop))
  }
}

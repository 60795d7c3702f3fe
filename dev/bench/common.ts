import { randomUUID } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import pg from 'pg'
import { projectRoot } from '../../lib/project-root.js'
import { startService, type RunOptions, type ServiceProcess } from '../tools/service-process.js'

export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100)
export const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
export const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
export const POSTGRES = { host: '127.0.0.1', port: 5432 }
/** The database of the suites that start the service as its own process. */
export const DATABASE = 'portal_bff_bench'
export const DATABASE_URL = `postgres://postgres@${POSTGRES.host}:${POSTGRES.port}/${DATABASE}`
export const REDIS_URL = 'redis://127.0.0.1:6379'

export interface Measure { requests: number, seconds: number, failures: number }

/** One autocannon run; failures are non-2xx answers and socket errors or timeouts. */
export async function load (options: autocannon.Options): Promise<Measure> {
  const result = await autocannon({ connections: CONNECTIONS, duration: SECONDS, ...options })
  return { requests: result.requests.total, seconds: result.duration, failures: result.non2xx + result.errors }
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
export async function withServers<T> (work: (start: (options: RunOptions) => Promise<ServiceProcess>) => Promise<T>): Promise<T> {
  const servers: ServiceProcess[] = []
  const start = async (options: RunOptions) => {
    const server = await startService(options)
    servers.push(server)
    return server
  }
  try {
    return await work(start)
  } finally {
    await Promise.all(servers.map(stop))
  }
}

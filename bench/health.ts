import { join } from 'node:path'
import autocannon from 'autocannon'
import pg from 'pg'
import { projectRoot } from '../lib/project-root.js'
import { PgCountingProxy } from '../tools/pg-counting-proxy.js'
import { startService, type ServiceProcess } from '../tools/service-process.js'

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const DATABASE = 'portal_bff_bench'
const POSTGRES = { host: '127.0.0.1', port: 5432 }

interface Measure { requests: number, seconds: number, non2xx: number, p99: number }

async function load (url: string): Promise<Measure> {
  const result = await autocannon({ url, connections: CONNECTIONS, duration: SECONDS })
  return { requests: result.requests.total, seconds: result.duration, non2xx: result.non2xx + result.errors, p99: result.latency.p99 }
}

async function ensureDatabase (): Promise<void> {
  const client = new pg.Client({ ...POSTGRES, user: 'postgres', database: 'postgres' })
  await client.connect()
  const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE])
  if (rowCount === 0) await client.query(`CREATE DATABASE ${DATABASE}`)
  await client.end()
}

async function peakRssMb (service: ServiceProcess): Promise<number> {
  const status = await import('node:fs/promises').then((fs) => fs.readFile(`/proc/${service.child.pid}/status`, 'utf8'))
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024
}

function rate (measures: Measure[]): number {
  const requests = measures.reduce((sum, m) => sum + m.requests, 0)
  const seconds = measures.reduce((sum, m) => sum + m.seconds, 0)
  return requests / seconds
}

/** GET /health against a minimal Fastify app; database queries under that load. */
export async function benchHealth (): Promise<void> {
  await ensureDatabase()
  const proxy = await PgCountingProxy.start(POSTGRES.port)
  const dist = join(projectRoot, 'dist')
  const baseline = await startService({ entry: join(dist, 'bench', 'minimal-app.js'), env: {} })
  const service = await startService({
    entry: join(dist, 'server.js'),
    env: { NODE_ENV: 'production-like', DATABASE_URL: proxy.url(DATABASE), LOG_DIR: join(projectRoot, 'logs', 'bench'), JWT_SECRET: 'bench-secret-that-is-at-least-32-chars' }
  })

  const results = { baseline: [] as Measure[], service: [] as Measure[] }
  let queries = 0
  let loadSeconds = 0
  try {
    await load(`${baseline.url}/health`)
    await load(`${service.url}/health`)
    for (let round = 1; round <= ROUNDS; round++) {
      results.baseline.push(await load(`${baseline.url}/health`))
      const before = proxy.queries
      const measure = await load(`${service.url}/health`)
      queries += proxy.queries - before
      loadSeconds += measure.seconds
      results.service.push(measure)
      process.stdout.write(`round ${round}: minimal ${Math.round(results.baseline.at(-1)!.requests / SECONDS)} req/s, service ${Math.round(measure.requests / SECONDS)} req/s\n`)
    }
  } finally {
    const rssMb = await peakRssMb(service)
    baseline.child.kill('SIGTERM')
    service.child.kill('SIGTERM')
    await Promise.all([baseline.exit, service.exit])
    await proxy.close()
    const minimal = rate(results.baseline)
    const health = rate(results.service)
    const failures = results.service.reduce((sum, m) => sum + m.non2xx, 0)
    process.stdout.write([
      '',
      `GET /health, ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${SECONDS} s`,
      `  minimal Fastify app (logger off): ${minimal.toFixed(0)} req/s`,
      `  service /health:                  ${health.toFixed(0)} req/s (non-2xx or errors: ${failures})`,
      `  ratio service / minimal:          ${(health / minimal).toFixed(2)} (target >= 0.80)`,
      `  database queries under load:      ${(queries / loadSeconds).toFixed(2)} per second (target <= 1)`,
      `  service peak RSS:                 ${rssMb.toFixed(0)} MB`,
      ''
    ].join('\n'))
  }
}

import { join } from 'node:path'
import { projectRoot } from '../lib/project-root.js'
import { PgCountingProxy } from '../tools/pg-counting-proxy.js'
import type { RunOptions } from '../tools/service-process.js'
import {
  CONNECTIONS, DATABASE, DATABASE_URL, POSTGRES, REDIS_URL, ROUNDS, SECONDS,
  deleteKeys, ensureDatabase, failures, load, median, peakRssMb, rate, runKeyPrefix, serviceEnv, stop, withServers, type Measure
} from './common.js'

interface Target {
  name: string
  options: RunOptions
  /** One per round, with the queries the counting proxy relayed meanwhile. */
  measures: Array<Measure & { queries: number }>
  peakRssMb: number
}

// Each round starts every target afresh. On this kind of machine two processes running the same
// code can differ by a quarter in CPU per request for their whole life (where the scheduler and
// the memory manager put them), so one process per target for the whole run measures its luck.
const ROUNDS_OF_HEALTH = Number(process.env.BENCH_HEALTH_ROUNDS ?? Math.max(ROUNDS, 6))
const WARM_UP_SECONDS = 2

/**
 * GET /health of the service against two baselines, each in its own process: a minimal Fastify app
 * (the ceiling) and a naive handler that checks PostgreSQL and Redis on every request (the floor).
 */
export async function benchHealth (): Promise<void> {
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('health')
  const proxy = await PgCountingProxy.start(POSTGRES.port)
  const dist = join(projectRoot, 'dist')
  try {
    await withServers(async (start) => {
      const target = (name: string, entry: string, env: Record<string, string>): Target =>
        ({ name, options: { entry: join(dist, entry), env }, measures: [], peakRssMb: 0 })
      const minimal = target('minimal', 'bench/minimal-app.js', {})
      // Straight to PostgreSQL: the proxy shares this process with autocannon, so relaying a query
      // per request would slow the naive handler by the measuring itself.
      const naive = target('naive', 'bench/naive-app.js', { DATABASE_URL, REDIS_URL })
      const service = target('service', 'server.js', serviceEnv({ DATABASE_URL: proxy.url(DATABASE), REDIS_KEY_PREFIX: keyPrefix }))
      const targets = [minimal, naive, service]

      for (let round = 1; round <= ROUNDS_OF_HEALTH; round++) {
        // Each round in another order, so that no target always runs after the same one.
        const order = targets.map((_, i) => targets[(i + round) % targets.length]!)
        for (const target of order) {
          const server = await start(target.options)
          const url = `${server.url}/health`
          await load({ url, duration: WARM_UP_SECONDS })
          const before = proxy.queries
          const measure = await load({ url })
          target.measures.push({ ...measure, queries: proxy.queries - before })
          target.peakRssMb = Math.max(target.peakRssMb, await peakRssMb(server))
          await stop(server)
        }
        const rates = targets.map(({ name, measures }) => `${name} ${rate(measures.slice(-1)).toFixed(0)} req/s`)
        process.stdout.write(`round ${round}: ${rates.join(', ')}\n`)
      }

      const queries = service.measures.reduce((sum, measure) => sum + measure.queries, 0)
      const loadSeconds = service.measures.reduce((sum, measure) => sum + measure.seconds, 0)
      const summary = ({ measures }: Target) => `${rate(measures).toFixed(0)} req/s (non-2xx or errors: ${failures(measures)})`
      // Over all rounds, and the median of the rounds' own ratios, which one noisy round cannot move.
      const ratio = (target: Target, baseline: Target) => {
        const perRound = target.measures.map((measure, round) => rate([measure]) / rate([baseline.measures[round]!]))
        return `${(rate(target.measures) / rate(baseline.measures)).toFixed(2)}, median of rounds ${median(perRound).toFixed(2)}`
      }
      process.stdout.write([
        '',
        `GET /health, ${CONNECTIONS} connections, ${ROUNDS_OF_HEALTH} rounds of ${SECONDS} s, each target a fresh process every round`,
        `  minimal Fastify app (logger off): ${summary(minimal)}`,
        `  naive handler (SELECT 1 + PING):  ${summary(naive)}, PostgreSQL direct`,
        `  service /health:                  ${summary(service)}`,
        `  ratio service / minimal:          ${ratio(service, minimal)} (target >= 0.80)`,
        `  ratio service / naive:            ${ratio(service, naive)} (target >= 5)`,
        `  database queries under load:      ${(queries / loadSeconds).toFixed(2)} per second (target <= 1)`,
        `  service peak RSS:                 ${service.peakRssMb.toFixed(0)} MB`,
        ''
      ].join('\n'))
    })
  } finally {
    await proxy.close()
    await deleteKeys(keyPrefix)
  }
}

import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { Redis } from 'ioredis'
import pg from 'pg'
import { PgCountingProxy } from '../tools/pg-counting-proxy.js'
import { DEV_BUILD, runServer, type RunOptions } from '../tools/service-process.js'
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
  /** Counts the queries the target sends, if it is measured for them. */
  counter?: PgCountingProxy
}

// Each round starts every target afresh. On this kind of machine two processes running the same
// code can differ by a quarter in CPU per request for their whole life (where the scheduler and
// the memory manager put them), so one process per target for the whole run measures its luck.
const ROUNDS_OF_HEALTH = Number(process.env.BENCH_HEALTH_ROUNDS ?? Math.max(ROUNDS, 6))
const WARM_UP_SECONDS = 2
// On loopback PostgreSQL and Redis answer in microseconds and share the two cores with everything
// measured, so the naive handler is bound by CPU; across a network it is bound by its pool and the
// round trip. The second pair of targets meets both dependencies through a relay that holds every
// answer this long (0: loopback only).
const DEPENDENCY_DELAY_MS = Number(process.env.BENCH_DEPENDENCY_DELAY_MS ?? 1)
const REDIS_PORT = Number(new URL(REDIS_URL).port)

/** PostgreSQL and Redis through the delay relay. */
interface DependenciesAway {
  /** The relay's PostgreSQL port, for the naive handler; the service goes through `counter` to it. */
  databaseUrl: string
  redisUrl: string
  counter: PgCountingProxy
  roundTrips: RoundTrips
}

interface RoundTrips { database: number, cache: number }

interface DelayRelay {
  /** The relay's port for each target port. */
  ports: Record<string, number>
  stop: () => Promise<void>
}

async function startDelayRelay (delayMs: number, targetPorts: number[]): Promise<DelayRelay> {
  const { child, exit, stderr } = runServer({
    entry: join(DEV_BUILD, 'dev', 'bench', 'delay-relay.js'),
    env: { DELAY_MS: String(delayMs), TARGET_PORTS: targetPorts.join(',') }
  })
  const stop = async () => {
    child.kill('SIGTERM')
    await exit
  }
  const line = await new Promise<string>((resolve, reject) => {
    exit.then((code) => reject(new Error(`delay relay exited with ${code}: ${stderr()}`)), reject)
    createInterface({ input: child.stdout! }).once('line', resolve)
  }).catch(async (error: unknown) => {
    await stop()
    throw error
  })
  return { ports: (JSON.parse(line) as { ports: Record<string, number> }).ports, stop }
}

/** Median milliseconds of one `SELECT 1` and one `PING`, one after the other: the round trip clients meet. */
async function roundTrips (databaseUrl: string, redisUrl: string): Promise<RoundTrips> {
  const SAMPLES = 200
  const database = new pg.Client({ connectionString: databaseUrl })
  const cache = new Redis(redisUrl)
  await database.connect()
  try {
    const timed = async (query: () => Promise<unknown>) => {
      const durations: number[] = []
      for (let i = 0; i < SAMPLES; i++) {
        const started = performance.now()
        await query()
        durations.push(performance.now() - started)
      }
      return median(durations)
    }
    return { database: await timed(() => database.query('SELECT 1')), cache: await timed(() => cache.ping()) }
  } finally {
    await database.end()
    cache.disconnect()
  }
}

/**
 * GET /health of the service against two baselines, each in its own process: a minimal Fastify app
 * (the ceiling) and a naive handler that checks PostgreSQL and Redis on every request (the floor);
 * the naive handler and the service again with their dependencies behind the delay relay.
 */
export async function benchHealth (): Promise<void> {
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('health')
  const proxy = await PgCountingProxy.start(POSTGRES.port)
  const dist = join(DEV_BUILD, 'dev')
  let relay: DelayRelay | undefined
  let away: DependenciesAway | undefined
  try {
    const direct = await roundTrips(DATABASE_URL, REDIS_URL)
    if (DEPENDENCY_DELAY_MS > 0) {
      relay = await startDelayRelay(DEPENDENCY_DELAY_MS, [POSTGRES.port, REDIS_PORT])
      const databaseUrl = `postgres://postgres@${POSTGRES.host}:${relay.ports[POSTGRES.port]}/${DATABASE}`
      const redisUrl = `redis://127.0.0.1:${relay.ports[REDIS_PORT]}`
      // The service away from its dependencies has its queries counted too: this counter relays to the delay relay.
      away = { databaseUrl, redisUrl, counter: await PgCountingProxy.start(relay.ports[POSTGRES.port]!), roundTrips: await roundTrips(databaseUrl, redisUrl) }
    }

    await withServers(async (start) => {
      const target = (name: string, entry: string, env: Record<string, string>, counter?: PgCountingProxy): Target =>
        ({ name, options: { entry: join(dist, entry), env }, measures: [], peakRssMb: 0, counter })
      const minimal = target('minimal', 'bench/minimal-app.js', {})
      // Straight to PostgreSQL: the proxy shares this process with autocannon, so relaying a query
      // per request would slow the naive handler by the measuring itself.
      const naive = target('naive', 'bench/naive-app.js', { DATABASE_URL, REDIS_URL })
      const service = target('service', 'server.js', serviceEnv({ DATABASE_URL: proxy.url(DATABASE), REDIS_KEY_PREFIX: keyPrefix }), proxy)
      const targets = [minimal, naive, service]
      const pairAway = away === undefined
        ? undefined
        : {
            naive: target('naive away', 'bench/naive-app.js', { DATABASE_URL: away.databaseUrl, REDIS_URL: away.redisUrl }),
            service: target('service away', 'server.js', serviceEnv({ DATABASE_URL: away.counter.url(DATABASE), REDIS_URL: away.redisUrl, REDIS_KEY_PREFIX: keyPrefix }), away.counter)
          }
      if (pairAway !== undefined) targets.push(pairAway.naive, pairAway.service)

      for (let round = 1; round <= ROUNDS_OF_HEALTH; round++) {
        // Each round in another order, so that no target always runs after the same one.
        const order = targets.map((_, i) => targets[(i + round) % targets.length]!)
        for (const target of order) {
          const server = await start(target.options)
          const url = `${server.url}/health`
          await load({ url, duration: WARM_UP_SECONDS })
          const before = target.counter?.queries ?? 0
          const measure = await load({ url })
          target.measures.push({ ...measure, queries: (target.counter?.queries ?? 0) - before })
          target.peakRssMb = Math.max(target.peakRssMb, await peakRssMb(server))
          await stop(server)
        }
        const rates = targets.map(({ name, measures }) => `${name} ${rate(measures.slice(-1)).toFixed(0)} req/s`)
        process.stdout.write(`round ${round}: ${rates.join(', ')}\n`)
      }

      const queriesPerSecond = ({ measures }: Target) => {
        const queries = measures.reduce((sum, measure) => sum + measure.queries, 0)
        return (queries / measures.reduce((sum, measure) => sum + measure.seconds, 0)).toFixed(2)
      }
      const summary = ({ measures }: Target) => `${rate(measures).toFixed(0)} req/s (non-2xx or errors: ${failures(measures)})`
      // Over all rounds, and the median of the rounds' own ratios, which one noisy round cannot move.
      const ratio = (target: Target, baseline: Target) => {
        const perRound = target.measures.map((measure, round) => rate([measure]) / rate([baseline.measures[round]!]))
        return `${(rate(target.measures) / rate(baseline.measures)).toFixed(2)}, median of rounds ${median(perRound).toFixed(2)}`
      }
      const ms = (value: number) => `${value.toFixed(2)} ms`
      process.stdout.write([
        '',
        `GET /health, ${CONNECTIONS} connections, ${ROUNDS_OF_HEALTH} rounds of ${SECONDS} s, each target a fresh process every round`,
        `  PostgreSQL and Redis on loopback (SELECT 1 ${ms(direct.database)}, PING ${ms(direct.cache)}, medians one after the other)`,
        `  minimal Fastify app (logger off): ${summary(minimal)}`,
        `  naive handler (SELECT 1 + PING):  ${summary(naive)}, PostgreSQL direct`,
        `  service /health:                  ${summary(service)}`,
        `  ratio service / minimal:          ${ratio(service, minimal)} (target >= 0.80)`,
        `  ratio service / naive:            ${ratio(service, naive)} (target >= 5)`,
        `  database queries under load:      ${queriesPerSecond(service)} per second (target <= 1)`,
        `  service peak RSS:                 ${service.peakRssMb.toFixed(0)} MB`,
        ...(pairAway === undefined || away === undefined
          ? []
          : [
              `  PostgreSQL and Redis behind a relay holding each answer ${DEPENDENCY_DELAY_MS} ms (SELECT 1 ${ms(away.roundTrips.database)}, PING ${ms(away.roundTrips.cache)})`,
              `  naive handler:                    ${summary(pairAway.naive)}`,
              `  service /health:                  ${summary(pairAway.service)}`,
              `  ratio service / naive:            ${ratio(pairAway.service, pairAway.naive)} (target >= 5)`,
              `  database queries under load:      ${queriesPerSecond(pairAway.service)} per second (target <= 1)`
            ]),
        ''
      ].join('\n'))
    })
  } finally {
    await away?.counter.close()
    await relay?.stop()
    await proxy.close()
    await deleteKeys(keyPrefix)
  }
}

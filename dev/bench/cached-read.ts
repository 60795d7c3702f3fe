import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { setTimeout } from 'node:timers/promises'
import type autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { CACHE_TTL_SECONDS } from '../../plugins/app/services-cache/index.js'
import { defaultBillingClients } from '../sandbox/index.js'
import { DEV_BUILD, type RunOptions, type ServiceProcess } from '../tools/service-process.js'
import {
  CONNECTIONS, DATABASE_URL, REDIS_URL, ROUNDS, SECONDS,
  cpuTime, threadCpuTimes, STEADY_WARM_UP_SECONDS, deleteKeys, ensureDatabase, freePort, failures, load, median, peakRssMb, rate, runKeyPrefix, serviceEnv, startQuiet, stop, withServers, type CpuTime, type Measure, ALT_NODE, altEnv
} from './common.js'
import { login } from './invoices.js'
import { formatProfiles, profileDirectory, profileUnderLoad, type Profiled } from './profile.js'
import { startOtlpSink, type OtlpSink } from './otlp-sink.js'
import { servicesCachePrefix } from '../../plugins/app/redis-keys.js'

// Fresh processes every round, as in the health suite: one process's luck lasts its whole life.
const ROUNDS_OF_READS = Number(process.env.BENCH_CACHED_READ_ROUNDS ?? Math.max(ROUNDS, 6))
const PAGE = 1
const LIMIT = 10
export const CACHED_PATH = `/api/invoices?page=${PAGE}&limit=${LIMIT}`
// BENCH_CACHED_READ_PROFILE=1: then a CPU profile of each under the same load, and where the service's CPU goes.
const PROFILE = process.env.BENCH_CACHED_READ_PROFILE === '1'
// A third target: another build of the project (BENCH_ALT_BUILD, its dist-dev folder) and/or this
// service with other settings (BENCH_ALT_ENV=LOG_LEVEL=warn,...): a change against this build, in
// the same rounds, before it is made here.
const ALT_BUILD = process.env.BENCH_ALT_BUILD
const ALT_ENV = altEnv()
// BENCH_ALT_ENV=OTEL_EXPORTER_OTLP_ENDPOINT=sink,...: the alt target traces, exporting to a collector this benchmark runs.
const OTLP_SINK = ALT_ENV.OTEL_EXPORTER_OTLP_ENDPOINT === 'sink'

/** A measured load, with the CPU time the server used meanwhile. */
export interface Run extends Measure {
  cpu: CpuTime
  /** The CPU time of each kind of thread meanwhile (see threadCpuTimes). */
  threads: Map<string, CpuTime>
}

const cpuOfRun = (run: Run) => (run.cpu.user + run.cpu.system) / run.requests
// BENCH_THREADS=1: each round's CPU a request by kind of thread too (the main thread's, the garbage collector's...).
const THREADS = process.env.BENCH_THREADS === '1'
const threadsOfRun = (run: Run) => [...run.threads].map(([name, { user, system }]) => ({ name, user, system }))
  .filter(({ user, system }) => user + system > 0).sort((a, b) => b.user + b.system - a.user - a.system)
  .map(({ name, user, system }) => `${name} ${((user + system) / run.requests).toFixed(1)} (kernel ${(system / run.requests).toFixed(1)})`)
  .join(', ')

interface Target {
  name: string
  options: RunOptions
  measures: Run[]
  peakRssMb: number
}

/** Each target's rate and p99 in its last measure. */
export function lastRound (targets: Array<{ name: string, measures: Measure[] }>): string {
  return targets.map(({ name, measures }) => `${name} ${rate(measures.slice(-1)).toFixed(0)} req/s p99 ${measures.at(-1)!.latencyP99Ms} ms`).join(', ')
}

/** A load of the server, with the CPU time it used meanwhile. */
export async function measuredLoad (server: ServiceProcess, options: autocannon.Options): Promise<Run> {
  const pid = server.child.pid!
  const [before, threadsBefore] = [await cpuTime(pid), await threadCpuTimes(pid)]
  const measure = await load(options)
  const [after, threadsAfter] = [await cpuTime(pid), await threadCpuTimes(pid)]
  const threads = new Map([...threadsAfter].map(([name, used]) => {
    const before = threadsBefore.get(name) ?? { user: 0, system: 0 }
    return [name, { user: used.user - before.user, system: used.system - before.system }]
  }))
  return { ...measure, cpu: { user: after.user - before.user, system: after.system - before.system }, threads }
}

export interface CacheReads { hits: number, misses: number }

export async function cacheReads (service: ServiceProcess): Promise<CacheReads> {
  const { hits, misses } = await (await fetch(`${service.url}/api/health/services/cache`)).json() as CacheReads
  return { hits, misses }
}

async function body (server: ServiceProcess, authorization: string): Promise<unknown> {
  return await cachedPage(server, { authorization })
}

/** The cached page as a client with these credentials gets it. */
export async function cachedPage (server: ServiceProcess, headers: Record<string, string>): Promise<unknown> {
  const response = await fetch(`${server.url}${CACHED_PATH}`, { headers })
  if (!response.ok) throw new Error(`GET ${CACHED_PATH}: ${response.status} ${await response.text()}`)
  return response.json()
}

/** The services cache's entry once the service has written it: after it answers, on a connection of its own. */
export async function writtenEntry (redis: Redis, key: string): Promise<string> {
  let cached = await redis.get(key)
  for (let attempt = 0; cached === null && attempt < 20; attempt++) {
    await setTimeout(50)
    cached = await redis.get(key)
  }
  if (cached === null) throw new Error(`the service left no cache entry at ${key}`)
  return cached
}

/** The services cache's key of the page (ServicesCache, routes/api/invoices.ts). */
export function cachedPageKey (keyPrefix: string, clientId: number): string {
  return `${servicesCachePrefix(keyPrefix)}invoices:${clientId}:any:${PAGE}:${LIMIT}`
}

/**
 * GET /api/invoices answered from the services cache, against a minimal Fastify route that reads
 * the same Redis key with the same token check (JWT verification and the blacklist key): what the
 * service adds to a cached read, and the p99 under load.
 */
export async function benchCachedRead (): Promise<void> {
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('cached-read')
  const client = defaultBillingClients[0]!
  const env = serviceEnv({ DATABASE_URL, REDIS_KEY_PREFIX: keyPrefix, RATE_LIMIT_MAX: '1000000000', SHUTDOWN_DELAY_MS: '0' })
  const cacheKey = cachedPageKey(keyPrefix, client.id)
  const dist = join(DEV_BUILD, 'dev')
  const service: Target = { name: 'service', options: { entry: join(dist, 'server.js'), env }, measures: [], peakRssMb: 0 }
  const minimal: Target = {
    name: 'minimal',
    options: { entry: join(dist, 'bench', 'minimal-cached-read.js'), env: { JWT_SECRET: env.JWT_SECRET!, REDIS_URL, REDIS_KEY_PREFIX: keyPrefix } },
    measures: [],
    peakRssMb: 0
  }
  const sink: OtlpSink | undefined = OTLP_SINK ? await startOtlpSink() : undefined
  if (sink !== undefined) ALT_ENV.OTEL_EXPORTER_OTLP_ENDPOINT = sink.url
  const alt: Target | undefined = ALT_BUILD === undefined && Object.keys(ALT_ENV).length === 0
    ? undefined
    : { name: 'service (alt)', options: { entry: join(ALT_BUILD ?? DEV_BUILD, 'dev', 'server.js'), node: ALT_NODE, env: { ...env, ...ALT_ENV } }, measures: [], peakRssMb: 0 }
  const targets = [service, minimal, ...alt === undefined ? [] : [alt]]
  // Under LOG_LEVEL=warn, say, the service does not log where it listens: it is given a port.
  const startOptions = async (target: Target) => target === alt && 'LOG_LEVEL' in ALT_ENV
    ? { ...target.options, env: { ...target.options.env, PORT: String(await freePort()) } }
    : target.options
  const redis = new Redis(REDIS_URL)
  let serviceReads: CacheReads = { hits: 0, misses: 0 }
  try {
    await withServers(async (start) => {
      // Once: sign in, and let the service fill the entry from the sandbox billing. The token
      // stays valid in every later process: same secret, same blacklist.
      const first = await start(service.options)
      const authorization = `Bearer ${await login(first, client.email, client.password)}`
      const expected = await body(first, authorization)
      const cached = await writtenEntry(redis, cacheKey)
      await stop(first)

      for (let round = 1; round <= ROUNDS_OF_READS; round++) {
        const order = targets.map((_, i) => targets[(i + round) % targets.length]!)
        for (const target of order) {
          // The entry as the service wrote it, for the whole round: every request of both is a hit.
          await redis.set(cacheKey, cached, 'EX', CACHE_TTL_SECONDS.invoices)
          const server = await start(await startOptions(target))
          const answered = await body(server, authorization)
          if (!isDeepStrictEqual(answered, expected)) throw new Error(`${target.name} answers ${JSON.stringify(answered)}, not the service's ${JSON.stringify(expected)}`)
          const url = `${server.url}${CACHED_PATH}`
          await load({ url, headers: { authorization }, duration: STEADY_WARM_UP_SECONDS })
          const before = target !== minimal ? await cacheReads(server) : undefined
          target.measures.push(await measuredLoad(server, { url, headers: { authorization } }))
          if (before !== undefined) {
            const after = await cacheReads(server)
            serviceReads = { hits: serviceReads.hits + after.hits - before.hits, misses: serviceReads.misses + after.misses - before.misses }
          }
          target.peakRssMb = Math.max(target.peakRssMb, await peakRssMb(server))
          await stop(server)
        }
        const cpuOfRound = targets.map(({ name, measures }) => `${name} ${cpuOfRun(measures.at(-1)!).toFixed(1)}`).join(', ')
        process.stdout.write(`round ${round}: ${lastRound(targets)}; CPU a request (µs): ${cpuOfRound}\n`)
        if (THREADS) process.stdout.write(`  by thread (µs a request): ${targets.map(({ name, measures }) => `${name}: ${threadsOfRun(measures.at(-1)!)}`).join('; ')}\n`)
      }
      if (PROFILE) {
        const directory = profileDirectory('cached-read')
        const profiled = []
        for (const target of targets) {
          await redis.set(cacheKey, cached, 'EX', CACHE_TTL_SECONDS.invoices)
          profiled.push(await profileUnderLoad(start, target.name, await startOptions(target), { url: CACHED_PATH, headers: { authorization } }, directory))
        }
        process.stdout.write(`\n${formatProfiles(profiled, [[profiled[0]!, profiled[1]!], ...alt === undefined ? [] : [[profiled[2]!, profiled[0]!] as [Profiled, Profiled]]])}`)
      }
    }, startQuiet)
  } finally {
    redis.disconnect()
    await deleteKeys(keyPrefix)
    await sink?.close()
  }

  const perRound = service.measures.map((measure, round) => rate([measure]) / rate([minimal.measures[round]!]))
  const p99 = ({ measures }: Target) => median(measures.map((measure) => measure.latencyP99Ms))
  const cpu = ({ measures }: Target) => measures.reduce((sum, run) => sum + run.cpu.user + run.cpu.system, 0) / measures.reduce((sum, run) => sum + run.requests, 0)
  // The acceptance figure: each round's CPU ratio, then their median (a round's two targets meet the same machine).
  const cpuRatioOfRounds = (of: Target) => median(of.measures.map((run, round) => cpuOfRun(minimal.measures[round]!) / cpuOfRun(run)))
  const summary = (target: Target) =>
    `${rate(target.measures).toFixed(0)} req/s, p99 ${p99(target).toFixed(0)} ms (median of rounds), CPU ${cpu(target).toFixed(1)} µs a request, peak RSS ${target.peakRssMb.toFixed(0)} MB (non-2xx or errors: ${failures(target.measures)})`
  process.stdout.write([
    '',
    `GET ${CACHED_PATH} as billing client ${client.id}, ${CONNECTIONS} connections, ${ROUNDS_OF_READS} rounds of ${SECONDS} s after ${STEADY_WARM_UP_SECONDS} s of warm-up, each target a fresh process every round`,
    '  every request a cache hit: the entry the service wrote is put back before each target\'s round',
    '  service: logging at info (a line per request), rate limit counted in Redis (never reached); minimal: logger off, no limit',
    `  service (services cache):          ${summary(service)}`,
    `  minimal route (JWT + EXISTS + GET): ${summary(minimal)}`,
    `  service cache reads:               ${serviceReads.hits} hits, ${serviceReads.misses} misses`,
    `  ratio service / minimal:           ${(rate(service.measures) / rate(minimal.measures)).toFixed(2)}, median of rounds ${median(perRound).toFixed(2)} (target >= 0.80)`,
    `    in CPU a request (minimal / service): ${(cpu(minimal) / cpu(service)).toFixed(2)}, median of rounds ${cpuRatioOfRounds(service).toFixed(2)} (target >= 0.80)`,
    `  p99 service / minimal:             ${(p99(service) / p99(minimal)).toFixed(2)}`,
    ...alt === undefined
      ? []
      : [
          `  service (alt):                     ${summary(alt)} (${ALT_BUILD ?? 'this build'}${Object.keys(ALT_ENV).length === 0 ? '' : `, ${process.env.BENCH_ALT_ENV}`})`,
          `  ratio alt / minimal:               ${(rate(alt.measures) / rate(minimal.measures)).toFixed(2)}; in CPU a request ${(cpu(minimal) / cpu(alt)).toFixed(2)}, median of rounds ${cpuRatioOfRounds(alt).toFixed(2)}`,
          `  ratio alt / service:               ${(rate(alt.measures) / rate(service.measures)).toFixed(2)}; in CPU a request ${(cpu(service) / cpu(alt)).toFixed(2)}; p99 ${(p99(alt) / p99(service)).toFixed(2)}`,
          ...sink === undefined ? [] : [`  spans exported by alt:             ${sink.received().exports} OTLP exports, ${(sink.received().bytes / 1e6).toFixed(1)} MB`]
        ],
    ''
  ].join('\n'))
  const failed = failures([...service.measures, ...minimal.measures])
  if (failed > 0) throw new Error(`cached read: ${failed} non-2xx answers or errors under load; expected none`)
  if (serviceReads.misses > 0) throw new Error(`cached read: ${serviceReads.misses} cache misses in the service's rounds; expected none`)
}

import { join } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { defaultBillingClients } from '../sandbox/index.js'
import { DEV_BUILD, type ServiceProcess } from '../tools/service-process.js'
import { DATABASE_URL, REDIS_URL, STEADY_WARM_UP_SECONDS, altEnv, cpuTime, deleteKeys, ensureDatabase, median, runKeyPrefix, serviceEnv, startQuiet, stop, withServers } from './common.js'
import { CACHED_PATH, cachedPageKey, writtenEntry } from './cached-read.js'
import { login } from './invoices.js'
import { startOtlpSink, type OtlpSink } from './otlp-sink.js'
import { formatProfiles, monotonicMicroseconds, profileDirectory, profiling, readProfile, type Profiled } from './profile.js'
import { mergeSummaries } from './cpuprofile-summary.js'

const ROUNDS = Number(process.env.BENCH_AB_ROUNDS ?? 4)
// Requests a second to each build: below what the machine serves, so both serve the same load.
const RATE = Number(process.env.BENCH_AB_RATE ?? 600)
const SECONDS = Number(process.env.BENCH_AB_SECONDS ?? 12)
const CONNECTIONS = Number(process.env.BENCH_AB_CONNECTIONS ?? 20)
// BENCH_AB_PROFILE=1: both under V8's CPU profiler too, and where the alt's CPU goes, in the same rounds.
const PROFILE = process.env.BENCH_AB_PROFILE === '1'
const ENTRY_TTL_SECONDS = 600

/** CPU time of a process between two readings, µs. */
async function cpuSince (pid: number, before: { user: number, system: number }): Promise<number> {
  const after = await cpuTime(pid)
  return after.user + after.system - before.user - before.system
}

/**
 * The cached read of this build and of another (BENCH_ALT_BUILD, its dist-dev folder), or of this
 * build with other settings (BENCH_ALT_ENV; OTEL_EXPORTER_OTLP_ENDPOINT=sink exports to a collector
 * this benchmark runs), under the same fixed-rate load at the same time, each a fresh process every
 * round: both meet the machine's other work alike, which alternating rounds do not give a shared
 * machine. Their CPU a request, and the ratio, alt / this build.
 */
export async function benchCachedReadBuilds (): Promise<void> {
  const altBuild = process.env.BENCH_ALT_BUILD
  const settings = altEnv()
  if (altBuild === undefined && Object.keys(settings).length === 0) throw new Error('BENCH_ALT_BUILD (the other build\'s dist-dev folder) or BENCH_ALT_ENV (other settings)')
  await ensureDatabase()
  // BENCH_BASE_ENV: settings of this build's target too (tracing with another sampler, say), the alt's on top of them.
  const baseSettings = altEnv('BENCH_BASE_ENV')
  // One collector for both when both name it (what it received is then both targets' exports).
  const sinkNamed = [settings, baseSettings].filter((named) => named.OTEL_EXPORTER_OTLP_ENDPOINT === 'sink')
  const sink = sinkNamed.length > 0 ? await startOtlpSink() : undefined
  for (const named of sinkNamed) named.OTEL_EXPORTER_OTLP_ENDPOINT = sink!.url
  const keyPrefix = runKeyPrefix('cached-read-ab')
  const client = defaultBillingClients[0]!
  const env = serviceEnv({ DATABASE_URL, REDIS_KEY_PREFIX: keyPrefix, RATE_LIMIT_MAX: '1000000000', ...baseSettings })
  const builds = [
    { name: 'this build', entry: join(DEV_BUILD, 'dev', 'server.js'), env },
    { name: 'alt', entry: join(altBuild ?? DEV_BUILD, 'dev', 'server.js'), env: { ...env, ...settings } }
  ]
  const redis = new Redis(REDIS_URL)
  const totals = builds.map(() => ({ cpu: 0, requests: 0 }))
  const ratios: number[] = []
  const profilesDirectory = profileDirectory('cached-read-ab')
  const profiled: Profiled[][] = []
  let exported: ReturnType<OtlpSink['received']> | undefined
  try {
    await withServers(async (start) => {
      const first = await start({ entry: builds[0]!.entry, env: builds[0]!.env })
      const authorization = `Bearer ${await login(first, client.email, client.password)}`
      await fetch(`${first.url}${CACHED_PATH}`, { headers: { authorization } })
      const key = cachedPageKey(keyPrefix, client.id)
      const cached = await writtenEntry(redis, key)
      await stop(first)
      for (let round = 1; round <= ROUNDS; round++) {
        await redis.set(key, cached, 'EX', ENTRY_TTL_SECONDS)
        const servers: ServiceProcess[] = []
        const profiles = builds.map(({ name }) => join(profilesDirectory, `${name.replaceAll(/[^a-z0-9-]+/gi, '-')}-${round}`))
        // Started in turn in either order, as a process started first may find the machine quieter.
        for (const build of round % 2 === 1 ? builds : [...builds].reverse()) {
          const i = builds.indexOf(build)
          servers[i] = await start({ entry: build.entry, env: build.env, execArgv: PROFILE ? await profiling(profiles[i]!) : [] })
        }
        const load = (server: ServiceProcess, duration: number) =>
          autocannon({ url: `${server.url}${CACHED_PATH}`, headers: { authorization }, connections: CONNECTIONS, duration, overallRate: RATE })
        await Promise.all(servers.map((server) => load(server, STEADY_WARM_UP_SECONDS)))
        const before = await Promise.all(servers.map((server) => cpuTime(server.child.pid!)))
        const from = monotonicMicroseconds()
        const results = await Promise.all(servers.map((server) => load(server, SECONDS)))
        const to = monotonicMicroseconds()
        const cpu = await Promise.all(servers.map((server, i) => cpuSince(server.child.pid!, before[i]!)))
        if (results.some((result) => result.non2xx + result.errors > 0)) throw new Error(`round ${round}: non-2xx answers or errors`)
        const perRequest = results.map((result, i) => cpu[i]! / result.requests.total)
        results.forEach((result, i) => { totals[i]!.cpu += cpu[i]!; totals[i]!.requests += result.requests.total })
        ratios.push(perRequest[1]! / perRequest[0]!)
        process.stdout.write(`round ${round}: ${builds.map(({ name }, i) => `${name} ${perRequest[i]!.toFixed(1)} µs a request (${results[i]!.requests.total} requests)`).join(', ')}, alt / this build ${ratios.at(-1)!.toFixed(3)}\n`)
        await Promise.all(servers.map(stop))
        if (PROFILE) {
          profiled.push(await Promise.all(builds.map(async ({ name }, i) => await readProfile(name, profiles[i]!, { from, to }, results[i]!.requests.total))))
        }
      }
    }, startQuiet)
  } finally {
    exported = sink?.received()
    redis.disconnect()
    await sink?.close()
    await deleteKeys(keyPrefix)
  }
  const [ours, alt] = totals.map(({ cpu, requests }) => cpu / requests)
  process.stdout.write([
    '',
    `GET ${CACHED_PATH}, this build and ${altBuild ?? 'this build'}${Object.keys(settings).length === 0 ? '' : ` with ${process.env.BENCH_ALT_ENV}`} at the same time, ${RATE} req/s each (${CONNECTIONS} connections), ${ROUNDS} rounds of ${SECONDS} s after ${STEADY_WARM_UP_SECONDS} s of warm-up`,
    `  CPU a request: this build ${ours!.toFixed(1)} µs, alt ${alt!.toFixed(1)} µs`,
    `  alt / this build: ${(alt! / ours!).toFixed(3)}, median of rounds ${median(ratios).toFixed(3)}`,
    ...sink === undefined ? [] : [`  spans exported${sinkNamed.includes(baseSettings) ? ' by both' : ' by alt'}: ${exported!.exports} OTLP exports, ${(exported!.bytes / 1e6).toFixed(1)} MB`],
    ''
  ].join('\n'))
  if (PROFILE) {
    // Every round's samples together: the two met the same machine in each.
    const [ours, theirs] = builds.map(({ name }, i): Profiled => ({
      name,
      summary: mergeSummaries(profiled.map((round) => round[i]!.summary)),
      requests: profiled.reduce((sum, round) => sum + round[i]!.requests, 0),
      file: profilesDirectory
    }))
    process.stdout.write(`\nV8's CPU profiles of the measured loads, ${profiled.length} rounds\n\n${formatProfiles([ours!, theirs!], [[theirs!, ours!]])}`)
  }
}

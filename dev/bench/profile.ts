import { mkdir, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type autocannon from 'autocannon'
import { projectRoot } from '../../lib/project-root.js'
import { DEV_BUILD, type RunOptions, type ServiceProcess } from '../tools/service-process.js'
import { DATABASE_URL, SECONDS, STEADY_WARM_UP_SECONDS, deleteKeys, ensureDatabase, load, runKeyPrefix, serviceEnv, startQuiet, stop, withServers } from './common.js'
import { formatSummary, summarise, type CpuProfile, type ProfileSummary } from './cpuprofile-summary.js'

const TOP_FUNCTIONS = Number(process.env.BENCH_PROFILE_TOP ?? 25)
// V8 samples every 1 ms by default: a few thousand samples in a run is little for functions of a few µs.
const SAMPLING_INTERVAL_US = 250
// Another build of the project (its dist-dev folder), profiled too and compared with this one's.
const ALT_BUILD = process.env.BENCH_ALT_BUILD

export interface Profiled { name: string, summary: ProfileSummary, requests: number, file: string }

/** The system's monotonic clock in µs: the clock of V8's profiles, in any process. */
export function monotonicMicroseconds (): number {
  return Number(process.hrtime.bigint() / 1000n)
}

/**
 * Runs one target under --cpu-prof, loads it (a warm-up, then the measured load), stops it, and
 * summarises the samples of the measured load alone: start-up and shutdown are left out.
 */
export async function profileUnderLoad (
  start: (options: RunOptions) => Promise<ServiceProcess>,
  name: string,
  options: RunOptions,
  request: autocannon.Options,
  directory: string
): Promise<Profiled> {
  const targetDirectory = join(directory, name.replaceAll(/[^a-z0-9-]+/gi, '-'))
  const execArgv = [...options.execArgv ?? [], ...await profiling(targetDirectory)]
  const server = await start({ ...options, execArgv })
  await load({ ...request, url: `${server.url}${request.url}`, duration: STEADY_WARM_UP_SECONDS })
  const from = monotonicMicroseconds()
  const measure = await load({ ...request, url: `${server.url}${request.url}`, duration: 2 * SECONDS })
  const to = monotonicMicroseconds()
  // The profile is written as the process exits.
  await stop(server)
  return await readProfile(name, targetDirectory, { from, to }, measure.requests)
}

/** The arguments that make a target write its CPU profile into `directory` as it exits. */
export async function profiling (directory: string): Promise<string[]> {
  await mkdir(directory, { recursive: true })
  return ['--cpu-prof', `--cpu-prof-dir=${directory}`, `--cpu-prof-interval=${SAMPLING_INTERVAL_US}`]
}

/** The one profile a stopped target wrote into `directory`, summarised over `window` (monotonic µs). */
export async function readProfile (name: string, directory: string, window: { from: number, to: number }, requests: number): Promise<Profiled> {
  const files = (await readdir(directory)).filter((file) => file.endsWith('.cpuprofile'))
  if (files.length !== 1) throw new Error(`${name}: expected one profile in ${directory}, found ${files.length}`)
  const file = join(directory, files[0]!)
  const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile
  if (profile.startTime > window.from || profile.endTime < window.to) throw new Error(`${name}: the profile (${profile.startTime}-${profile.endTime} µs) does not cover the load (${window.from}-${window.to} µs): not the same clock?`)
  return { name, summary: summarise(profile, window), requests, file }
}

export function profileDirectory (suite: string): string {
  return join(projectRoot, 'logs', 'bench', 'profiles', `${suite}-${new Date().toISOString().replaceAll(':', '-')}`)
}

/** Each target's profile, and for each pair what the first costs more per request than the second, by area and by function. */
export function formatProfiles (profiled: Profiled[], pairs: Array<[Profiled, Profiled]>): string {
  const lines = profiled.map(({ name, summary, requests, file }) => `${name} (${file}):\n${formatSummary(summary, TOP_FUNCTIONS, requests)}`)
  for (const [target, baseline] of pairs) {
    const busy = ({ summary, requests }: Profiled) => (summary.totalMicroseconds - summary.idleMicroseconds) / requests
    // Per request, what the target spends more (or less) than the baseline, by key.
    const differences = (entries: (profiled: Profiled) => Array<[string, number]>) => {
      const ours = new Map(entries(target).map(([key, microseconds]) => [key, microseconds / target.requests]))
      const theirs = new Map(entries(baseline).map(([key, microseconds]) => [key, microseconds / baseline.requests]))
      return [...new Set([...ours.keys(), ...theirs.keys()])]
        .map((key) => ({ key, microseconds: (ours.get(key) ?? 0) - (theirs.get(key) ?? 0) }))
        .filter(({ microseconds }) => Math.abs(microseconds) >= 0.02)
        .sort((a, b) => b.microseconds - a.microseconds)
    }
    const signed = ({ key, microseconds }: { key: string, microseconds: number }) => `  ${microseconds >= 0 ? '+' : ''}${microseconds.toFixed(2).padStart(6)} µs  ${key}`
    lines.push([
      `${target.name} - ${baseline.name}: ${(busy(target) - busy(baseline)).toFixed(1)} µs of CPU more per request (${busy(target).toFixed(1)} against ${busy(baseline).toFixed(1)})`,
      'by area:',
      ...differences(({ summary }) => summary.areas.map(({ area, microseconds }) => [area, microseconds])).slice(0, 15).map(signed),
      `by function, the ${TOP_FUNCTIONS} largest differences:`,
      ...differences(({ summary }) => summary.functions.map(({ name, microseconds }) => [name, microseconds])).slice(0, TOP_FUNCTIONS).map(signed)
    ].join('\n'))
  }
  return `${lines.join('\n\n')}\n`
}

/**
 * CPU profiles of the service and of the minimal app under GET /health load, each in its own
 * process: where the service's CPU per request goes, and what it spends that Fastify alone does not.
 */
export async function benchHealthProfile (): Promise<void> {
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('health-profile')
  const directory = profileDirectory('health')
  const dist = join(DEV_BUILD, 'dev')
  try {
    const env = serviceEnv({ DATABASE_URL, REDIS_KEY_PREFIX: keyPrefix, SHUTDOWN_DELAY_MS: '0' })
    const [service, minimal, alt] = await withServers(async (start) => [
      await profileUnderLoad(start, 'service', { entry: join(dist, 'server.js'), env }, { url: '/health' }, directory),
      await profileUnderLoad(start, 'minimal', { entry: join(dist, 'bench', 'minimal-app.js'), env: {} }, { url: '/health' }, directory),
      ...ALT_BUILD === undefined ? [] : [await profileUnderLoad(start, 'service (alt build)', { entry: join(ALT_BUILD, 'dev', 'server.js'), env }, { url: '/health' }, directory)]
    ], startQuiet)
    const pairs: Array<[Profiled, Profiled]> = [[service!, minimal!], ...alt === undefined ? [] : [[alt, service!] as [Profiled, Profiled]]]
    process.stdout.write(`\nGET /health, ${2 * SECONDS} s of load after ${STEADY_WARM_UP_SECONDS} s of warm-up, self time of the samples of the load\n\n${formatProfiles([service!, minimal!, ...alt === undefined ? [] : [alt]], pairs)}`)
  } finally {
    await deleteKeys(keyPrefix)
  }
}

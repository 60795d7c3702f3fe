import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { setTimeout } from 'node:timers/promises'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { CACHE_TTL_SECONDS } from '../../plugins/app/services-cache/index.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'
import { defaultBillingClients } from '../sandbox/index.js'
import { DEV_BUILD, exited, type RunOptions, type ServiceProcess } from '../tools/service-process.js'
import {
  CONNECTIONS, DATABASE_URL, REDIS_URL, ROUNDS, SECONDS,
  deleteKeys, ensureDatabase, failures, freePort, load, median, peakRssMb, rate, runKeyPrefix, serviceEnv, startQuiet, stop, withServers
} from './common.js'
import { CACHED_PATH, cacheReads, cachedPage, cachedPageKey, lastRound, measuredLoad, writtenEntry, type CacheReads, type Run } from './cached-read.js'
import { login } from './invoices.js'
import { formatProfiles, profileDirectory, profileUnderLoad } from './profile.js'

// The cookie read against the bearer read: fresh processes every round, as in cached-read.
const ROUNDS_OF_READS = Number(process.env.BENCH_SESSION_ROUNDS ?? Math.max(ROUNDS, 6))
const WARM_UP_SECONDS = 2
/** The cookie's req/s over the bearer token's, at least. */
const COOKIE_TARGET = 0.95
// BENCH_SESSION_PROFILE=1: then a CPU profile of each credential under the same load, and their difference.
const PROFILE = process.env.BENCH_SESSION_PROFILE === '1'

// Renewals: sessions signed in on the first instance, loaded through all of them at once.
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 50)
const INSTANCES = Number(process.env.BENCH_SESSION_INSTANCES ?? 2)
const RENEWAL_SECONDS = Number(process.env.BENCH_SESSION_SECONDS ?? 12)
/** An idle timeout of 10 s: a renewal interval of a tenth of it, 1 s (SessionStore). */
const IDLE_TIMEOUT_S = 10
const RENEWAL_INTERVAL_S = IDLE_TIMEOUT_S / 10
// Commands that change a key, as a renewal or an end of a session would send them.
const WRITES = new Set(['SET', 'SETEX', 'PSETEX', 'GETEX', 'GETSET', 'SETRANGE', 'APPEND', 'EXPIRE', 'PEXPIRE', 'EXPIREAT', 'PEXPIREAT', 'PERSIST', 'DEL', 'UNLINK', 'RENAME'])

const SCRIPTS = new Set(['EVAL', 'EVALSHA', 'EVAL_RO', 'EVALSHA_RO', 'FCALL'])

interface Credential {
  name: string
  headers: Record<string, string>
  measures: Run[]
  peakRssMb: number
}

/** Signs in as the portal's browser app does; answers the `cookie` header that carries the session. */
export async function signInSession (service: ServiceProcess, email: string, password: string): Promise<string> {
  const response = await fetch(`${service.url}/auth/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password })
  })
  if (!response.ok) throw new Error(`POST /auth/session: ${response.status} ${await response.text()}`)
  const cookie = response.headers.getSetCookie().map((header) => header.split(';')[0]!).find((pair) => pair.startsWith(`${SESSION_COOKIE}=`))
  if (cookie === undefined) throw new Error('POST /auth/session set no session cookie')
  return cookie
}

/**
 * Cookie sessions at their cost: the cached invoices read authenticated by the session cookie
 * against the same read with a bearer token, and the Redis writes of sessions renewed under load.
 */
export async function benchSessions (): Promise<void> {
  await ensureDatabase()
  // BENCH_SESSION_ROUNDS=0: the renewals alone.
  if (ROUNDS_OF_READS > 0) await benchCookieRead()
  await benchRenewals()
}

/**
 * GET /api/invoices answered from the services cache, by the same service build, with the session
 * cookie (a SHA-256 of it and one MGET of the session, its revocation and the epoch) and with a
 * bearer token (HS256 verification and one MGET of its revocation and the epoch).
 */
async function benchCookieRead (): Promise<void> {
  const keyPrefix = runKeyPrefix('sessions')
  const client = defaultBillingClients[0]!
  const env = serviceEnv({ DATABASE_URL, REDIS_KEY_PREFIX: keyPrefix, RATE_LIMIT_MAX: '1000000000' })
  const options: RunOptions = { entry: join(DEV_BUILD, 'dev', 'server.js'), env }
  const cacheKey = cachedPageKey(keyPrefix, client.id)
  const redis = new Redis(REDIS_URL)
  let bearer: Credential | undefined
  let cookie: Credential | undefined
  const reads: CacheReads = { hits: 0, misses: 0 }
  try {
    await withServers(async (start) => {
      // Once: both credentials, and the entry the service fills from the sandbox billing. Both
      // stay valid in every later process: same secret, same Redis (the session's idle timeout is
      // the default half hour, past the suite's end).
      const first = await start(options)
      bearer = { name: 'bearer', headers: { authorization: `Bearer ${await login(first, client.email, client.password)}` }, measures: [], peakRssMb: 0 }
      cookie = { name: 'cookie', headers: { cookie: await signInSession(first, client.email, client.password) }, measures: [], peakRssMb: 0 }
      const expected = await cachedPage(first, bearer.headers)
      const cached = await writtenEntry(redis, cacheKey)
      await stop(first)
      const credentials = [bearer, cookie]

      for (let round = 1; round <= ROUNDS_OF_READS; round++) {
        for (const credential of round % 2 === 1 ? credentials : [...credentials].reverse()) {
          await redis.set(cacheKey, cached, 'EX', CACHE_TTL_SECONDS.invoices)
          const server = await start(options)
          const answered = await cachedPage(server, credential.headers)
          if (!isDeepStrictEqual(answered, expected)) throw new Error(`with the ${credential.name} the service answers ${JSON.stringify(answered)}, not ${JSON.stringify(expected)}`)
          const url = `${server.url}${CACHED_PATH}`
          await load({ url, headers: credential.headers, duration: WARM_UP_SECONDS })
          const before = await cacheReads(server)
          credential.measures.push(await measuredLoad(server, { url, headers: credential.headers }))
          const after = await cacheReads(server)
          reads.hits += after.hits - before.hits
          reads.misses += after.misses - before.misses
          credential.peakRssMb = Math.max(credential.peakRssMb, await peakRssMb(server))
          await stop(server)
        }
        process.stdout.write(`round ${round}: ${lastRound(credentials)}\n`)
      }
      if (PROFILE) {
        const directory = profileDirectory('sessions')
        const profiled = []
        for (const credential of credentials) {
          await redis.set(cacheKey, cached, 'EX', CACHE_TTL_SECONDS.invoices)
          profiled.push(await profileUnderLoad(start, credential.name, options, { url: CACHED_PATH, headers: credential.headers }, directory))
        }
        process.stdout.write(`\n${formatProfiles(profiled, [[profiled[1]!, profiled[0]!]])}`)
      }
    }, startQuiet)
  } finally {
    redis.disconnect()
    await deleteKeys(keyPrefix)
  }

  const byBearer = bearer!
  const byCookie = cookie!
  const perRound = byCookie.measures.map((measure, round) => rate([measure]) / rate([byBearer.measures[round]!]))
  const p99 = ({ measures }: Credential) => median(measures.map((measure) => measure.latencyP99Ms))
  const cpu = ({ measures }: Credential) => measures.reduce((sum, run) => sum + run.cpu.user + run.cpu.system, 0) / measures.reduce((sum, run) => sum + run.requests, 0)
  const summary = (credential: Credential) =>
    `${rate(credential.measures).toFixed(0)} req/s, p99 ${p99(credential).toFixed(0)} ms (median of rounds), CPU ${cpu(credential).toFixed(1)} µs a request, peak RSS ${credential.peakRssMb.toFixed(0)} MB (non-2xx or errors: ${failures(credential.measures)})`
  const ratio = rate(byCookie.measures) / rate(byBearer.measures)
  process.stdout.write([
    '',
    `GET ${CACHED_PATH} as billing client ${client.id}, ${CONNECTIONS} connections, ${ROUNDS_OF_READS} rounds of ${SECONDS} s, a fresh service process for each credential every round, the order alternating`,
    '  every request a cache hit: the entry the service wrote is put back before each run',
    `  bearer token:     ${summary(byBearer)}`,
    `  session cookie:   ${summary(byCookie)}`,
    `  cache reads:      ${reads.hits} hits, ${reads.misses} misses`,
    `  ratio cookie / bearer: ${ratio.toFixed(2)}, median of rounds ${median(perRound).toFixed(2)} (rounds ${perRound.map((value) => value.toFixed(2)).join(', ')}; target >= ${COOKIE_TARGET})${Math.max(ratio, median(perRound)) < COOKIE_TARGET ? ': BELOW TARGET' : ''}`,
    `    in CPU a request (bearer / cookie): ${(cpu(byBearer) / cpu(byCookie)).toFixed(2)}`,
    `  p99 cookie / bearer: ${(p99(byCookie) / p99(byBearer)).toFixed(2)}`,
    ''
  ].join('\n'))
  const failed = failures([...byBearer.measures, ...byCookie.measures])
  if (failed > 0) throw new Error(`cookie read: ${failed} non-2xx answers or errors under load; expected none`)
  if (reads.misses > 0) throw new Error(`cookie read: ${reads.misses} cache misses; expected none`)
}

/** A redis-server of the suite's own: its MONITOR sees the service's commands alone, and costs no one else. */
async function privateRedis (): Promise<{ url: string, end: () => Promise<void> }> {
  const port = await freePort()
  const directory = await mkdtemp(join(tmpdir(), 'bench-sessions-redis-'))
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', directory, '--loglevel', 'warning'], { stdio: 'ignore' })
  const exit = exited(child)
  const end = async () => {
    child.kill('SIGTERM')
    await exit
    await rm(directory, { recursive: true, force: true })
  }
  const url = `redis://127.0.0.1:${port}`
  for (let attempt = 0; ; attempt++) {
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
    probe.on('error', () => {})
    const ready = await probe.connect().then(async () => (await probe.ping()) === 'PONG', () => false)
    probe.disconnect()
    if (ready) return { url, end }
    if (attempt === 50) {
      await end()
      throw new Error(`redis-server on ${port} did not answer`)
    }
    await setTimeout(100)
  }
}

/**
 * Sessions renewed under load: SESSIONS sessions, every one of them in use on every instance at
 * once for RENEWAL_SECONDS, longer than their idle timeout; each command that writes a session key
 * is seen by MONITOR on the suite's own Redis, with Redis's time.
 */
async function benchRenewals (): Promise<void> {
  const keyPrefix = runKeyPrefix('sessions')
  const redis = await privateRedis()
  const sessionKeys = `${keyPrefix}session:`
  const env = serviceEnv({
    DATABASE_URL,
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: keyPrefix,
    RATE_LIMIT_MAX: '1000000000',
    LOGIN_RATE_LIMIT_MAX: String(10 * SESSIONS),
    SESSION_IDLE_TIMEOUT_S: String(IDLE_TIMEOUT_S)
  })
  const client = defaultBillingClients[0]!
  /** Redis's times (s) of the writes of each session key. */
  const writes = new Map<string, number[]>()
  let live = 0
  /** Scripts run on a session key: renewals sent, whether or not they wrote. */
  let scripts = 0
  let measures: autocannon.Result[] = []
  const monitored = new Redis(redis.url)
  try {
    await withServers(async (start) => {
      const instances: ServiceProcess[] = []
      for (let i = 0; i < INSTANCES; i++) instances.push(await start({ entry: join(DEV_BUILD, 'dev', 'server.js'), env }))
      const cookies: string[] = []
      for (let i = 0; i < SESSIONS; i++) cookies.push(await signInSession(instances[0]!, client.email, client.password))
      // The sign-ins' own writes are done: from here on a write of a session key is a renewal.
      const monitor = await monitored.monitor()
      monitor.on('monitor', (time: string, args: string[]) => {
        const command = args[0]!.toUpperCase()
        // A script's keys follow the script and their count; MONITOR shows the commands it runs too.
        if (SCRIPTS.has(command) && args[3]?.startsWith(sessionKeys) === true) scripts++
        const key = args[1]
        if (!WRITES.has(command) || key?.startsWith(sessionKeys) !== true) return
        writes.set(key, [...writes.get(key) ?? [], Number(time)])
      })
      // Each request takes the next session, whatever its connection: every session is in use all along, on every instance.
      let sent = 0
      const connections = Math.max(1, Math.floor(CONNECTIONS / INSTANCES))
      measures = await Promise.all(instances.map((instance) => autocannon({
        url: instance.url,
        connections,
        duration: RENEWAL_SECONDS,
        requests: [{ method: 'GET', path: CACHED_PATH, setupRequest: (request) => ({ ...request, headers: { ...request.headers, cookie: cookies[sent++ % SESSIONS]! } }) }]
      })))
      // Renewals are written after the answer: let the last ones arrive.
      await setTimeout(500)
      monitor.disconnect()
      // Past their idle timeout since sign-in: alive only if renewed.
      for (const cookie of cookies) {
        const response = await fetch(`${instances[0]!.url}/auth/session`, { headers: { cookie } })
        if (response.ok) live++
      }
    }, startQuiet)
  } finally {
    monitored.disconnect()
    await redis.end()
    await deleteKeys(keyPrefix)
  }

  const counts = [...writes.values()].map((times) => times.length)
  while (counts.length < SESSIONS) counts.push(0)
  const total = counts.reduce((sum, count) => sum + count, 0)
  const bound = Math.ceil(RENEWAL_SECONDS / RENEWAL_INTERVAL_S) + 1
  const gaps = [...writes.values()].flatMap((times) => times.slice(1).map((time, i) => time - times[i]!))
  const requests = measures.reduce((sum, result) => sum + result.requests.total, 0)
  const failed = measures.reduce((sum, result) => sum + result.non2xx + result.errors, 0)
  process.stdout.write([
    '',
    `${SESSIONS} cookie sessions (SESSION_IDLE_TIMEOUT_S=${IDLE_TIMEOUT_S}: renewal interval ${RENEWAL_INTERVAL_S} s), ${INSTANCES} instances, each session in use on every instance for ${RENEWAL_SECONDS} s (GET ${CACHED_PATH}, ${CONNECTIONS} connections in all)`,
    `  requests: ${requests} (${(requests / RENEWAL_SECONDS).toFixed(0)} req/s, ${(requests / SESSIONS / RENEWAL_SECONDS).toFixed(0)} a session a second; non-2xx or errors: ${failed})`,
    `  commands writing a session key (MONITOR of the suite's own Redis): ${total}, by session min ${Math.min(...counts)} / median ${median(counts)} / max ${Math.max(...counts)} (bound ${bound}: ceil(${RENEWAL_SECONDS} / ${RENEWAL_INTERVAL_S}) + 1)`,
    `  scripts run on a session key (renewals sent by the instances, written or not): ${scripts}`,
    `  writes per session per renewal interval: ${(total / SESSIONS / (RENEWAL_SECONDS / RENEWAL_INTERVAL_S)).toFixed(2)} on average, ${(Math.max(...counts) / (RENEWAL_SECONDS / RENEWAL_INTERVAL_S)).toFixed(2)} at most (target <= 1)`,
    `  shortest time between two writes of one session: ${gaps.length === 0 ? '-' : `${(Math.min(...gaps) * 1000).toFixed(0)} ms`} (median ${gaps.length === 0 ? '-' : `${(median(gaps) * 1000).toFixed(0)} ms`})`,
    `  sessions live after ${RENEWAL_SECONDS} s, past their idle timeout: ${live} of ${SESSIONS}`,
    ''
  ].join('\n'))
  if (failed > 0) throw new Error(`renewals: ${failed} non-2xx answers or errors under load; expected none`)
  const over = counts.filter((count) => count > bound).length
  if (over > 0) throw new Error(`renewals: ${over} sessions written more than ${bound} times in ${RENEWAL_SECONDS} s`)
  if (live < SESSIONS) throw new Error(`renewals: ${SESSIONS - live} sessions ended while in use`)
}

import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { defaultBillingClients, defaultBillingInvoices } from '../sandbox/index.js'
import { DEV_BUILD, type ServiceProcess } from '../tools/service-process.js'
import {
  CONNECTIONS, DATABASE_URL, ROUNDS, SECONDS,
  deleteKeys, ensureDatabase, failures, load, peakRssMb, rate, runKeyPrefix, serviceEnv, withServers, type Measure
} from './common.js'

// Far beyond what one client sends in a minute here: the limiter still counts every request in
// Redis, but never answers 429.
const RATE_LIMIT_MAX = 1_000_000_000
const HIT_PATH = '/api/invoices?page=1&limit=10'
// The query schema's bounds: pages 2 to 10,000 for each limit give about a million paths that are
// not the hit's.
const MAX_PAGE = 10_000
const MAX_LIMIT = 100
const SETTLE_POLL_MS = 100

/** Redis errors count as misses too: the read goes to the upstream. */
interface CacheReads { hits: number, misses: number, errors: number }

interface Variant {
  name: string
  nextPath: () => string
  measures: Measure[]
  /** The service's own count of cache reads during this variant's rounds. */
  reads: CacheReads
}

/** Every call a path no request of this run asked for before, so every request misses the cache. */
function newPaths (): () => string {
  let sent = 0
  return () => {
    const page = 2 + sent % (MAX_PAGE - 1)
    const limit = 1 + Math.floor(sent / (MAX_PAGE - 1)) % MAX_LIMIT
    sent++
    return `/api/invoices?page=${page}&limit=${limit}`
  }
}

async function cacheReads (service: ServiceProcess): Promise<CacheReads> {
  const response = await fetch(`${service.url}/api/health/services/cache`)
  const { hits, misses, errors } = await response.json() as CacheReads
  return { hits, misses, errors }
}

/**
 * The service's cache reads once they stop moving: requests still in flight when autocannon stops
 * finish afterwards, and would otherwise count in the next variant's round.
 */
async function settledCacheReads (service: ServiceProcess): Promise<CacheReads> {
  let reads = await cacheReads(service)
  for (;;) {
    await sleep(SETTLE_POLL_MS)
    const next = await cacheReads(service)
    if (next.hits === reads.hits && next.misses === reads.misses) return next
    reads = next
  }
}

export async function login (service: ServiceProcess, email: string, password: string): Promise<string> {
  const response = await fetch(`${service.url}/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password })
  })
  if (!response.ok) throw new Error(`login failed: ${response.status} ${await response.text()}`)
  const { accessToken } = await response.json() as { accessToken: string }
  return accessToken
}

/**
 * Authenticated GET /api/invoices, answered from the services cache against every request a miss
 * that goes through the billing queue to the sandbox billing embedded in the service.
 */
export async function benchInvoices (): Promise<void> {
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('invoices')
  // The sandbox's first billing client, who has invoices.
  const client = defaultBillingClients[0]!
  const clientInvoices = defaultBillingInvoices.filter((invoice) => invoice.userid === client.id).length
  try {
    await withServers(async (start) => {
      const service = await start({
        entry: join(DEV_BUILD, 'dev', 'server.js'),
        env: serviceEnv({ DATABASE_URL, REDIS_KEY_PREFIX: keyPrefix, RATE_LIMIT_MAX: String(RATE_LIMIT_MAX) })
      })
      const authorization = `Bearer ${await login(service, client.email, client.password)}`
      const hit: Variant = { name: 'hit', nextPath: () => HIT_PATH, measures: [], reads: { hits: 0, misses: 0, errors: 0 } }
      const miss: Variant = { name: 'miss', nextPath: newPaths(), measures: [], reads: { hits: 0, misses: 0, errors: 0 } }
      // Both variants build each request the same way, so the load generator costs them alike.
      const drive = async (variant: Variant) => {
        const measure = await load({
          url: service.url,
          headers: { authorization },
          requests: [{ method: 'GET', setupRequest: (request) => ({ ...request, path: variant.nextPath() }) }]
        })
        // startService keeps every line the service prints: at a log line per request they would
        // pile up in this process.
        service.lines.length = 0
        return measure
      }

      for (const variant of [hit, miss]) await drive(variant)
      for (let round = 1; round <= ROUNDS; round++) {
        for (const variant of [hit, miss]) {
          const before = await settledCacheReads(service)
          variant.measures.push(await drive(variant))
          const after = await settledCacheReads(service)
          variant.reads.hits += after.hits - before.hits
          variant.reads.misses += after.misses - before.misses
          variant.reads.errors += after.errors - before.errors
        }
        const rates = [hit, miss].map(({ name, measures }) => `${name} ${rate(measures.slice(-1)).toFixed(0)} req/s`)
        process.stdout.write(`round ${round}: ${rates.join(', ')}\n`)
      }

      const serviceRssMb = await peakRssMb(service)
      const summary = ({ measures, reads }: Variant) =>
        `${rate(measures).toFixed(0)} req/s (non-2xx or errors: ${failures(measures)}; cache reads: ${reads.hits} hits, ${reads.misses} misses, ${reads.errors} Redis errors)`
      process.stdout.write([
        '',
        `GET /api/invoices as billing client ${client.id}, ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${SECONDS} s`,
        `  hit: always ${HIT_PATH}; miss: a new page each time, through the billing queue to the sandbox`,
        `  (miss pages lie past the client's ${clientInvoices} invoices, so most come back empty)`,
        `  rate limit:                       RATE_LIMIT_MAX=${RATE_LIMIT_MAX} a minute: every request counted, none answered 429`,
        '  service logging:                  info, as in production: a line per request to stdout and the log file',
        `  cache hit:                        ${summary(hit)}`,
        `  cache miss:                       ${summary(miss)}`,
        `  ratio hit / miss:                 ${(rate(hit.measures) / rate(miss.measures)).toFixed(2)}`,
        `  service peak RSS:                 ${serviceRssMb.toFixed(0)} MB`,
        ''
      ].join('\n'))

      const failed = failures([...hit.measures, ...miss.measures])
      if (failed > 0) throw new Error(`GET /api/invoices: ${failed} non-2xx answers or errors under load; expected none`)
      if (miss.reads.hits > 0) throw new Error(`GET /api/invoices: ${miss.reads.hits} cache hits in the miss rounds; expected none`)
    })
  } finally {
    await deleteKeys(keyPrefix)
  }
}

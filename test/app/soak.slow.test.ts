import t from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { request } from 'undici'
import { startTestSandbox, testEnv, testKeyPrefix } from '../helpers/app.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { PrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'
import { provisioningOutcome, seedCrmOrders } from '../helpers/provisioning.js'
import { expectedStatuses, healthProbes, mixedTraffic, type Exchange } from '../helpers/soak-traffic.js'
import { collectGarbage, inspectorUrl } from '../helpers/inspector.js'
import { startService, type ServiceProcess } from '../helpers/service-process.js'

/*
 * The bounded soak: mixed traffic and a steady flow of platform events for SOAK_SECONDS (60 in CI;
 * `npm run soak -- --minutes 10` for longer), with, in the middle, a Redis restart, a PostgreSQL
 * hang, a billing black-hole and a CRM session drop. Everything runs on loopback and stops itself.
 */
const SECONDS = Number(process.env.SOAK_SECONDS ?? 60)
const FAULT_MS = 5000
const EVENTS_PER_SECOND = 4
const HEALTH_TIMEOUT_MS = 1000
const HEALTH_CACHE_MS = 1000
// The documented answer bound of /health, plus what a busy two-core machine adds to scheduling.
const HEALTH_ANSWER_BOUND_MS = HEALTH_TIMEOUT_MS + 250 + 250
// A probe may report a run that started before a change: up to the reuse time plus one check's bound.
const HEALTH_LAG_MS = HEALTH_CACHE_MS + HEALTH_TIMEOUT_MS + 500
// After a dependency returns: the client's reconnect delay (at most 2 s) and one stale run.
const RECOVERY_MS = 2000 + HEALTH_LAG_MS
// No request of the mixed traffic may go unanswered for longer (the longest queue deadline is 3 s).
const ANSWER_BOUND_MS = 10_000

t.setTimeout((SECONDS + 240) * 1000)

const LEASE_TTL_MS = 6000
// The events check reads the subscription holder's report, written at each lease renewal (a third
// of CRM_EVENTS_LEASE_TTL_MS): after a CRM fault it may say so one renewal longer.
const REPORT_LAG_MS = LEASE_TTL_MS / 3
// A session drop and an expired token together can cost the subscription several failed attempts in
// a row before it connects again, each followed by the backoff's jittered wait
// (integrations/crm/backoff.ts): the allowance covers three, at most 0.5, 1 and 2 s.
const RECONNECT_BACKOFF_MS = 500 + 1000 + 2000

/**
 * A fault from its start to its end; `restoring` is when the end began (a restarted Redis may answer
 * before `to`); `recoveryMs`, how long after `to` a failure may still be the fault's.
 */
interface Window { fault: string, from: number, restoring: number, to: number, recoveryMs: number }

function rssKb (pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0)
}

async function query<T extends pg.QueryResultRow> (url: string, sql: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query<T>(sql, values)).rows
  } finally {
    await client.end()
  }
}

async function login (service: ServiceProcess): Promise<string> {
  const response = await request(`${service.url}/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' })
  })
  return ((await response.body.json()) as { accessToken: string }).accessToken
}

/** A 5xx is an answer only in the service's documented shapes: the error body, or a health report. */
function isDocumentedFailure (body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false
  const fields = body as Record<string, unknown>
  if ('stack' in fields) return false
  return (typeof fields.code === 'string' && typeof fields.correlationId === 'string') ||
    (typeof fields.status === 'string' && typeof fields.checks === 'object')
}

t.test(`soak: ${SECONDS} s of mixed traffic and events through a Redis restart, a PostgreSQL hang, a billing black-hole and a CRM session drop`, async (t) => {
  const [postgres, redis, sandbox] = await Promise.all([
    PrivatePostgres.start(),
    PrivateRedis.start({ persistent: true }),
    // A daily API quota that minutes of traffic do not exhaust: the soak is about faults, not quotas.
    startTestSandbox(t, { crm: { streaming: { connectTimeoutMs: 1000 }, apiUsage: { used: 0, max: 100_000_000 } } })
  ])
  t.teardown(() => postgres.destroy())
  t.teardown(() => redis.kill())

  const service = await startService(testEnv({
    ...sandbox.settings,
    DATABASE_URL: postgres.url,
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: testKeyPrefix(),
    CRM_EVENTS_ENABLED: 'true',
    CRM_EVENTS_LEASE_TTL_MS: String(LEASE_TTL_MS),
    CRM_EVENTS_CONNECT_MARGIN_MS: '500',
    HEALTH_CHECK_TIMEOUT_MS: String(HEALTH_TIMEOUT_MS),
    HEALTH_CHECK_CACHE_MS: String(HEALTH_CACHE_MS),
    // GET /auth/health-check reuses a run for 30 s by default (the CRM's API cost): one run inside a
    // fault would answer 503 for 30 s after it, past any recovery this soak allows. The same reuse
    // as /health keeps one model of lag for both.
    INTEGRATION_CHECK_CACHE_MS: String(HEALTH_CACHE_MS),
    UPSTREAM_TIMEOUT_MS: '1000',
    BILLING_QUEUE_TIMEOUT_MS: '3000',
    CRM_QUEUE_TIMEOUT_MS: '3000',
    DATABASE_CONNECT_TIMEOUT_MS: '1000',
    DATABASE_QUERY_TIMEOUT_MS: '2000',
    // The soak is about faults, not about the rate limiter.
    RATE_LIMIT_MAX: '1000000',
    LOGIN_RATE_LIMIT_MAX: '1000000'
  }), { execArgv: ['--inspect=127.0.0.1:0'] })
  t.teardown(() => { if (service.child.exitCode === null) service.child.kill('SIGKILL') })
  const pid = service.child.pid as number
  await waitFor('the subscription', async () => {
    const response = await request(`${service.url}/health/queues`)
    return ((await response.body.json()) as { events: { state: string } }).events.state === 'connected'
  }, 30_000)

  const eventCount = Math.floor(SECONDS * 0.85 * EVENTS_PER_SECOND)
  const crmOrderIds = await seedCrmOrders(sandbox, eventCount)
  const token = await login(service)

  const started = performance.now()
  const now = () => performance.now() - started
  const at = (fraction: number) => sleep(Math.max(0, SECONDS * 1000 * fraction - now()))
  const stop = new AbortController()
  const traffic = mixedTraffic({ baseUrl: service.url, token, workers: 6, boundMs: ANSWER_BOUND_MS, started, signal: stop.signal })
  const probes = healthProbes({ baseUrl: service.url, everyMs: 250, boundMs: ANSWER_BOUND_MS, started, signal: stop.signal })

  const rss: Array<{ at: number, kb: number }> = []
  const rssSampler = setInterval(() => { if (service.child.exitCode === null) rss.push({ at: now(), kb: rssKb(pid) }) }, 1000)
  t.teardown(() => clearInterval(rssSampler))

  const events = (async () => {
    for (const [index, id] of crmOrderIds.entries()) {
      await sleep(Math.max(0, (index * 1000) / EVENTS_PER_SECOND - now()))
      sandbox.crm.publishOrderProvisionRequested(id)
    }
  })()

  const windows: Window[] = []
  async function fault (name: string, fraction: number, begin: () => Promise<void> | void, end: () => Promise<void> | void, recoveryMs = RECOVERY_MS) {
    await at(fraction)
    const from = now()
    await begin()
    await sleep(FAULT_MS)
    const restoring = now()
    await end()
    windows.push({ fault: name, from, restoring, to: now(), recoveryMs })
  }
  // What the process retains, read after a full collection: RSS between collections rises and
  // falls with the collector's headroom, which a minute of traffic may not see settle.
  const inspector = inspectorUrl(service.stderr())
  const retainedKb = async () => {
    await collectGarbage(inspector)
    return rssKb(pid)
  }
  await at(0.2)
  const warmKb = await retainedKb()

  await fault('Redis restart', 0.25, () => redis.stop(), () => redis.start())
  await fault('PostgreSQL hang', 0.40, () => postgres.hang(), () => postgres.resume())
  await fault('billing black-hole', 0.55, () => sandbox.billing.injectFault({ kind: 'blackhole' }), () => sandbox.billing.clearFaults())
  await fault('CRM session drop', 0.70, () => { sandbox.crm.dropAllSessions(); sandbox.crm.expireAccessTokens() }, () => {}, RECOVERY_MS + REPORT_LAG_MS + RECONNECT_BACKOFF_MS)

  await at(1)
  const endKb = await retainedKb()
  stop.abort()
  const [exchanges, health] = await Promise.all([traffic, probes, events])
  clearInterval(rssSampler)

  await t.test('no crash and no unhandled rejection', async (t) => {
    t.equal(service.child.exitCode, null, 'the service is still running')
    const fatal = service.lines.filter((line) => Number(line.level) >= 60)
    t.same(fatal, [], 'no fatal log line (close-with-grace logs an unhandled rejection or exception at 60)')
    t.notMatch(service.stderr(), /Unhandled|uncaught/i, 'nothing unhandled on stderr')
  })

  await t.test('every request answered, within its bound, in a documented shape', async (t) => {
    const failuresOutsideFaults: Exchange[] = []
    const unexpected: Exchange[] = []
    for (const exchange of exchanges) {
      if (exchange.status === 0 || exchange.tookMs > ANSWER_BOUND_MS) unexpected.push(exchange)
      else if (exchange.status >= 500) {
        if (!isDocumentedFailure(exchange.body)) unexpected.push(exchange)
        const during = windows.some((window) => exchange.sentAt + exchange.tookMs >= window.from && exchange.sentAt <= window.to + window.recoveryMs)
        if (!during) failuresOutsideFaults.push(exchange)
      } else if (!expectedStatuses(exchange.route).includes(exchange.status)) unexpected.push(exchange)
    }
    t.ok(exchanges.length > SECONDS * 10, `${exchanges.length} requests made`)
    t.same(unexpected.slice(0, 5), [], `every request answered in time and as documented (${unexpected.length} not)`)
    t.same(failuresOutsideFaults.slice(0, 5), [], `no 5xx away from the faults (${failuresOutsideFaults.length})`)
    t.comment(windows.map((window) => `${window.fault}: ${Math.round(window.from)}-${Math.round(window.to)} ms`).join('\n'))
    t.comment(`slowest answer: ${Math.round(exchanges.reduce((slowest, exchange) => Math.max(slowest, exchange.tookMs), 0))} ms`)
    const counts = new Map<string, number>()
    for (const exchange of exchanges) counts.set(`${exchange.route} ${exchange.status}`, (counts.get(`${exchange.route} ${exchange.status}`) ?? 0) + 1)
    t.comment([...counts].sort().map(([key, count]) => `${key}: ${count}`).join('\n'))
  })

  await t.test('/health answers within its bound and tells the truth throughout', async (t) => {
    const slow = health.filter((probe) => probe.status === 0 || probe.tookMs > HEALTH_ANSWER_BOUND_MS)
    t.same(slow.map((probe) => ({ at: Math.round(probe.sentAt), tookMs: Math.round(probe.tookMs) })), [], `every probe answered within ${HEALTH_ANSWER_BOUND_MS} ms`)
    const checks = (probe: Exchange) => (probe.body as { checks?: Record<string, string> }).checks ?? {}
    const window = (name: string) => windows.find((window) => window.fault === name)!
    const lies: string[] = []
    const judged = { redisDown: 0, postgresHung: 0, allUp: 0 }
    const redisDown = window('Redis restart')
    const postgresHung = window('PostgreSQL hang')
    const within = (probe: Exchange, from: number, to: number) => probe.sentAt >= from && probe.sentAt + probe.tookMs <= to
    for (const probe of health) {
      if (within(probe, redisDown.from + HEALTH_LAG_MS, redisDown.restoring)) {
        judged.redisDown++
        if (probe.status !== 503 || checks(probe).cache !== 'fail') lies.push(`${Math.round(probe.sentAt)} ms: ${probe.status}, cache ${checks(probe).cache} while Redis was down`)
      }
      if (within(probe, postgresHung.from + HEALTH_LAG_MS, postgresHung.restoring)) {
        judged.postgresHung++
        if (probe.status !== 503 || checks(probe).database !== 'fail') lies.push(`${Math.round(probe.sentAt)} ms: ${probe.status}, database ${checks(probe).database} while PostgreSQL hung`)
      }
      const nearCoreFault = [redisDown, postgresHung].some((fault) => probe.sentAt + probe.tookMs >= fault.from && probe.sentAt <= fault.to + RECOVERY_MS)
      if (!nearCoreFault) {
        judged.allUp++
        if (probe.status !== 200) lies.push(`${Math.round(probe.sentAt)} ms: ${probe.status} ${JSON.stringify(probe.body)} with PostgreSQL and Redis up`)
      }
    }
    t.comment(`probes judged: ${judged.redisDown} with Redis down, ${judged.postgresHung} with PostgreSQL hung, ${judged.allUp} with both up (the billing and CRM faults included)`)
    t.ok(judged.redisDown > 0 && judged.postgresHung > 0 && judged.allUp > 0, 'probes fell in every kind of period')
    t.ok(health.length > SECONDS * 2, `${health.length} probes`)
    t.same(lies, [], '/health matched the state of PostgreSQL and Redis')
  })

  await t.test('every event provisioned exactly once', async (t) => {
    await waitFor('every order Active', async () => {
      const [row] = await query<{ active: string }>(postgres.url, "SELECT count(*) AS active FROM orders WHERE crm_order_id = ANY($1) AND status = 'Active'", [crmOrderIds])
      return Number(row?.active) === crmOrderIds.length
    }, 120_000).catch(async (error: unknown) => {
      t.comment(JSON.stringify(await query(postgres.url, 'SELECT status, failure_reason, count(*) FROM orders WHERE crm_order_id = ANY($1) GROUP BY 1, 2', [crmOrderIds])))
      throw error
    })
    const rows = await query<{ crm_order_id: string, count: string }>(postgres.url, 'SELECT crm_order_id, count(*) FROM orders WHERE crm_order_id = ANY($1) GROUP BY 1', [crmOrderIds])
    t.equal(rows.length, crmOrderIds.length, 'one stored order per event')
    t.ok(rows.every((row) => row.count === '1'), 'no order stored twice')
    const outcome = provisioningOutcome(sandbox, crmOrderIds)
    t.equal(outcome.activations, crmOrderIds.length, 'one telecom activation per order')
    t.equal(outcome.distinctKeys, crmOrderIds.length, 'every activation under the order\'s own idempotency key')
    t.equal(outcome.billingAccepted, crmOrderIds.length, 'every billing order accepted')
    t.equal(outcome.crmActivated, crmOrderIds.length, 'every CRM order Activated')
  })

  await t.test('memory: RSS grows less than 10% after warm-up', async (t) => {
    const mb = (kb: number) => Math.round(kb / 1024)
    const tenths = Array.from({ length: 10 }, (_, tenth) => rss.find((sample) => sample.at >= SECONDS * 100 * tenth))
    t.comment(`RSS by tenth of the run, MB: ${tenths.map((sample) => sample === undefined ? '-' : mb(sample.kb)).join(' ')}`)
    t.comment(`RSS after a full collection: ${mb(warmKb)} MB after warm-up (20% of the run), ${mb(endKb)} MB at the end`)
    t.ok(warmKb > 0 && endKb > 0, 'RSS sampled')
    t.ok(endKb < warmKb * 1.1, `growth ${(((endKb / warmKb) - 1) * 100).toFixed(1)}% (< 10%)`)
  })

  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0, 'a clean shutdown at the end')
})

import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { BillingClient } from '../../integrations/billing/client.js'
import { lockOptions } from '../../plugins/app/orders/provisioning-job.js'
import { loadConfig } from '../../settings.js'
import { startSandbox, type Sandbox } from '../sandbox/index.js'
import { DEV_BUILD, startService, type ServiceProcess } from '../tools/service-process.js'
import { DATABASE_URL, deleteKeys, ensureDatabase, median, runKeyPrefix, serviceEnv } from './common.js'

const RECOVERY_ORDERS = Number(process.env.BENCH_RECOVERY_ORDERS ?? 200)
const RECOVERY_ROUNDS = Number(process.env.BENCH_RECOVERY_ROUNDS ?? 3)
const FAILOVER_KILLS = Number(process.env.BENCH_FAILOVER_KILLS ?? 6)
// The goals, median and worst: every order Active within this of the kill and restart; the subscription taken over within this of the holder's death.
const RECOVERY_GOAL_S = { median: 5, worst: 6 }
const TAKEOVER_GOAL_S = { median: 3, worst: 4 }
// Each telecom call this late, so that jobs are running when the service is killed.
const TELECOM_LATENCY_MS = 30
const POLL_MS = 50

/** The settings the suites run with: the defaults, which are what they measure. */
const DEFAULTS = loadConfig({ NODE_ENV: 'bench', JWT_SECRET: 'bench-secret-that-is-at-least-32-chars' }).config

interface Run {
  sandbox: Sandbox
  schema: string
  env: Record<string, string>
  close: () => Promise<void>
}

async function onDatabase<T> (work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: DATABASE_URL })
  await client.connect()
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

/** A sandbox, a schema and a key prefix of their own, and the environment of a service using them. */
async function prepare (suite: string): Promise<Run> {
  await ensureDatabase()
  const schema = `bench_${randomUUID().replaceAll('-', '')}`
  const keyPrefix = runKeyPrefix(suite)
  await onDatabase((client) => client.query(`CREATE SCHEMA ${schema}`))
  const sandbox = await startSandbox({ crm: { streaming: { connectTimeoutMs: 1000 }, apiUsage: { used: 0, max: 10_000_000 } } })
  const env = serviceEnv({
    ...sandbox.settings,
    DATABASE_URL: `${DATABASE_URL}?options=${encodeURIComponent(`-c search_path=${schema}`)}`,
    REDIS_KEY_PREFIX: keyPrefix,
    CRM_EVENTS_ENABLED: 'true',
    // The sandbox advises 1 s long polls: a stream that hangs is noticed in 1.5 s.
    CRM_EVENTS_CONNECT_MARGIN_MS: '500',
    SHUTDOWN_DELAY_MS: '0'
  })
  return {
    sandbox,
    schema,
    env,
    close: async () => {
      await sandbox.close()
      await onDatabase((client) => client.query(`DROP SCHEMA ${schema} CASCADE`))
      await deleteKeys(keyPrefix)
    }
  }
}

function start (run: Run): Promise<ServiceProcess> {
  return startService({ entry: join(DEV_BUILD, 'dev', 'server.js'), env: run.env })
}

function kill (service: ServiceProcess): Promise<number | null> {
  if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill('SIGKILL')
  return service.exit
}

/** The instance's part in the subscription; `unreachable` when it does not answer. */
async function subscriptionState (service: ServiceProcess): Promise<string> {
  try {
    const response = await fetch(`${service.url}/health/queues`)
    return ((await response.json()) as { events: { state: string } }).events.state
  } catch {
    return 'unreachable'
  }
}

async function until (what: string, probe: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs
  while (!await probe()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(POLL_MS)
  }
}

/** Orders pending in billing and in Pending Review in the CRM, as the portal leaves them. */
async function seedOrders (sandbox: Sandbox, count: number): Promise<string[]> {
  const billing = new BillingClient({ url: sandbox.settings.BILLING_API_URL!, identifier: sandbox.settings.BILLING_API_IDENTIFIER!, secret: sandbox.settings.BILLING_API_SECRET! })
  try {
    const ids: string[] = []
    for (let i = 0; i < count; i++) {
      const { orderId } = await billing.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
      ids.push(sandbox.crm.putOrder({ Name: `Order ${orderId}`, Status: 'Pending Review', BillingOrderId__c: String(orderId), BillingClientId__c: '1', Product__c: '1' }))
    }
    return ids
  } finally {
    await billing.close()
  }
}

async function countByStatus (client: pg.Client, schema: string): Promise<Record<string, number>> {
  const { rows } = await client.query<{ status: string, count: string }>(`SELECT status, count(*) FROM ${schema}.orders GROUP BY status`)
  return Object.fromEntries(rows.map(({ status, count }) => [status, Number(count)]))
}

/** Each order's every upstream effect exactly once: one activation, one accepted billing order, one CRM status. */
function exactlyOnce (sandbox: Sandbox, ids: string[]): string | undefined {
  const activations = sandbox.telecom.activations.filter((activation) => ids.includes(activation.orderId)).length
  const billingOrderIds = new Set(ids.map((id) => Number(sandbox.crm.order(id)?.BillingOrderId__c)))
  const accepted = sandbox.billing.orders.filter((order) => billingOrderIds.has(order.id) && order.status === 'Active').length
  const activated = ids.filter((id) => sandbox.crm.order(id)?.Status === 'Activated').length
  if (activations === ids.length && accepted === ids.length && activated === ids.length) return undefined
  return `activations ${activations}, billing orders accepted ${accepted}, CRM orders activated ${activated}, of ${ids.length}`
}

const seconds = (ms: number) => (ms / 1000).toFixed(1)

/** The instance's longest event-loop pause since its last scrape (prom-client's monitorEventLoopDelay), in ms; 0 when it does not answer. */
async function eventLoopPauseMs (service: ServiceProcess): Promise<number> {
  try {
    const text = await (await fetch(`${service.url}/metrics`)).text()
    const seen = /^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)
    return seen === null ? 0 : Number(seen[1]) * 1000
  } catch {
    return 0
  }
}

/**
 * Scrapes the live instances' longest event-loop pause every half second until stopped: the risk a
 * short job lock takes. An instance's first scrape covers its start (modules loaded, the app built),
 * counted apart from the pauses under load.
 */
function samplePauses (services: () => ServiceProcess[]): { stop: () => Promise<{ underLoad: number, atStart: number }> } {
  const longest = { underLoad: 0, atStart: 0 }
  const scraped = new Set<ServiceProcess>()
  const sampling = new AbortController()
  const sampler = (async () => {
    while (!sampling.signal.aborted) {
      const live = services().filter((service) => service.child.exitCode === null && service.child.signalCode === null)
      await Promise.all(live.map(async (service) => {
        const pause = await eventLoopPauseMs(service)
        if (scraped.has(service)) longest.underLoad = Math.max(longest.underLoad, pause)
        else longest.atStart = Math.max(longest.atStart, pause)
        scraped.add(service)
      }))
      await sleep(500)
    }
  })()
  return {
    stop: async () => {
      sampling.abort()
      await sampler
      return longest
    }
  }
}

/**
 * SIGKILL mid-stream, then a restart: how long after it every order is Active, the jobs the killed
 * instance held waiting for their locks to expire and the stalled-job check to free them, and the
 * events it had not handed off waiting for the subscription lease.
 */
export async function benchRecovery (): Promise<void> {
  const lockMs = DEFAULTS.PROVISIONING_LOCK_MS
  const leaseMs = DEFAULTS.CRM_EVENTS_LEASE_TTL_MS
  const lines = [
    `Recovery: ${RECOVERY_ORDERS} OrderProvisionRequested__e events at once, SIGKILL once a quarter of the orders are Active, a restart at once (${TELECOM_LATENCY_MS} ms telecom calls)`,
    `  PROVISIONING_LOCK_MS ${lockMs} (stalled-job check every ${lockOptions(lockMs).stalledInterval} ms), CRM_EVENTS_LEASE_TTL_MS ${leaseMs}: a held job runs again within ${seconds(lockMs * 1.5)} s of the kill, the lease is taken within ${seconds(leaseMs * 5 / 4)} s`
  ]
  const recoveries: number[] = []
  const pauses = { underLoad: 0, atStart: 0 }
  for (let round = 1; round <= RECOVERY_ROUNDS; round++) {
    const run = await prepare('recovery')
    const services: ServiceProcess[] = []
    let pauseSampler: ReturnType<typeof samplePauses> | undefined
    try {
      const first = await start(run)
      services.push(first)
      await until('the subscription', async () => (await subscriptionState(first)) === 'connected', 30_000)
      pauseSampler = samplePauses(() => services)
      const ids = await seedOrders(run.sandbox, RECOVERY_ORDERS)
      run.sandbox.telecom.injectFault({ kind: 'latency', ms: TELECOM_LATENCY_MS })
      const counts = await onDatabase(async (client) => {
        for (const id of ids) run.sandbox.crm.publishOrderProvisionRequested(id)
        await until('a quarter of the orders Active', async () => ((await countByStatus(client, run.schema)).Active ?? 0) >= RECOVERY_ORDERS / 4, 120_000)
        await kill(first)
        const killedAt = performance.now()
        const atKill = await countByStatus(client, run.schema)
        // Their jobs were running: locked by the dead instance until the locks expire.
        const held = (await client.query<{ crm_order_id: string }>(`SELECT crm_order_id FROM ${run.schema}.orders WHERE status = 'Provisioning'`)).rows.map((row) => row.crm_order_id)
        const second = await start(run)
        services.push(second)
        const listening = performance.now() - killedAt
        const subscribed = until('the subscription', async () => (await subscriptionState(second)) === 'connected', 60_000).then(() => performance.now() - killedAt)
        const heldActive = until('the held jobs done', async () => Number((await client.query<{ count: string }>(`SELECT count(*) FROM ${run.schema}.orders WHERE status = 'Active' AND crm_order_id = ANY($1)`, [held])).rows[0]?.count) === held.length, 180_000).then(() => performance.now() - killedAt)
        await until('every order Active', async () => ((await countByStatus(client, run.schema)).Active ?? 0) >= RECOVERY_ORDERS, 180_000)
        return { atKill, listening, subscribed: await subscribed, heldActive: await heldActive, recovered: performance.now() - killedAt }
      })
      const longestPause = await pauseSampler.stop()
      pauses.underLoad = Math.max(pauses.underLoad, longestPause.underLoad)
      pauses.atStart = Math.max(pauses.atStart, longestPause.atStart)
      const problem = exactlyOnce(run.sandbox, ids)
      if (problem !== undefined) throw new Error(`round ${round}: not exactly once: ${problem}`)
      recoveries.push(counts.recovered)
      const { Active: active = 0, Provisioning: inFlight = 0 } = counts.atKill
      lines.push(
        `  round ${round}: at the kill ${active} Active, ${inFlight} Provisioning (their jobs in flight); after the kill and restart:`,
        `    listening ${seconds(counts.listening)} s; subscribed ${seconds(counts.subscribed)} s; the jobs in flight done ${seconds(counts.heldActive)} s; every order Active ${seconds(counts.recovered)} s; each upstream effect once per order`,
        `    longest event-loop pause of either instance under this load: ${Math.round(longestPause.underLoad)} ms (${Math.round(longestPause.atStart)} ms while one started)`
      )
    } finally {
      await pauseSampler?.stop()
      await Promise.all(services.map(kill))
      await run.close()
    }
  }
  lines.push(
    `  restart to every order Active: median ${seconds(median(recoveries))} s, worst ${seconds(Math.max(...recoveries))} s (goal: median ≤ ${RECOVERY_GOAL_S.median} s, worst ≤ ${RECOVERY_GOAL_S.worst} s)`,
    `  longest event-loop pause under load: ${Math.round(pauses.underLoad)} ms (${Math.round(pauses.atStart)} ms while an instance started), against a lock renewed every ${lockOptions(lockMs).lockRenewTime} ms that is lost only by a renewal ${lockMs - lockOptions(lockMs).lockRenewTime} ms late`,
    ''
  )
  process.stdout.write(['', ...lines].join('\n'))
}

/**
 * Two instances; the subscription's holder SIGKILLed, several times: how long until the other holds
 * a connected subscription, sampling both instances' states and the sandbox CRM's streaming sessions
 * all along for two subscribers at once.
 */
export async function benchFailover (): Promise<void> {
  const leaseMs = DEFAULTS.CRM_EVENTS_LEASE_TTL_MS
  const lines = [
    `Failover: two instances, the subscription's holder SIGKILLed ${FAILOVER_KILLS} times (a new instance started in its place each time)`,
    `  CRM_EVENTS_LEASE_TTL_MS ${leaseMs}, renewed every ${Math.floor(leaseMs / 4)} ms: a takeover within ${seconds(leaseMs * 5 / 4)} s of the death`
  ]
  const run = await prepare('failover')
  const services: ServiceProcess[] = []
  const takeovers: number[] = []
  const activeAfter: number[] = []
  let samples = 0
  let mostHolders = 0
  // Samples with two instances holding, or with more subscriptions than the kills explain.
  let overlaps = 0
  try {
    const live = new Set([await start(run), await start(run)])
    services.push(...live)
    await until('a subscription', async () => (await Promise.all([...live].map(subscriptionState))).includes('connected'), 30_000)
    const ids = await seedOrders(run.sandbox, FAILOVER_KILLS + 1)
    const activeOrder = (id: string) => onDatabase((client) => until('the order Active', async () => (await client.query(`SELECT 1 FROM ${run.schema}.orders WHERE crm_order_id = $1 AND status = 'Active'`, [id])).rowCount === 1, 60_000))
    // A first order stores a replay position, which the next holder resumes from.
    run.sandbox.crm.publishOrderProvisionRequested(ids[0]!)
    await activeOrder(ids[0]!)
    // The CRM counts subscribe requests: beside the first holder's, one per kill, the survivor's.
    const subscribesAtStart = run.sandbox.crm.streamingStats.subscribes
    let kills = 0
    const sampling = new AbortController()
    const sampler = (async () => {
      while (!sampling.signal.aborted) {
        const states = await Promise.all([...live].map(subscriptionState))
        const holders = states.filter((state) => state !== 'standby' && state !== 'unreachable').length
        samples++
        mostHolders = Math.max(mostHolders, holders)
        if (holders > 1 || run.sandbox.crm.streamingStats.subscribes - subscribesAtStart > kills) overlaps++
        await sleep(POLL_MS)
      }
    })()
    try {
      for (let kill = 0; kill < FAILOVER_KILLS; kill++) {
        const states = await Promise.all([...live].map(subscriptionState))
        const holder = [...live][states.indexOf('connected')]
        if (holder === undefined) throw new Error(`no connected holder before kill ${kill + 1}: ${states.join(', ')}`)
        live.delete(holder)
        holder.child.kill('SIGKILL')
        kills++
        const killedAt = performance.now()
        // An order published while nobody listens: replayed to the next holder.
        run.sandbox.crm.publishOrderProvisionRequested(ids[kill + 1]!)
        const [other] = [...live]
        await until('the takeover', async () => (await subscriptionState(other!)) === 'connected', 60_000)
        takeovers.push(performance.now() - killedAt)
        await activeOrder(ids[kill + 1]!)
        activeAfter.push(performance.now() - killedAt)
        await holder.exit
        const replacement = await start(run)
        services.push(replacement)
        live.add(replacement)
        // Kills fall anywhere in the renewal period.
        await sleep(1000 + Math.random() * leaseMs / 4)
      }
    } finally {
      sampling.abort()
      await sampler
    }
    const problem = exactlyOnce(run.sandbox, ids)
    if (problem !== undefined) throw new Error(`not exactly once: ${problem}`)
  } finally {
    await Promise.all(services.map(kill))
    await run.close()
  }
  lines.push(
    `  kill to the other instance connected: ${takeovers.map(seconds).join(', ')} s; median ${seconds(median(takeovers))} s, worst ${seconds(Math.max(...takeovers))} s (goal: median ≤ ${TAKEOVER_GOAL_S.median} s, worst ≤ ${TAKEOVER_GOAL_S.worst} s)`,
    `  kill to an order published at it Active: median ${seconds(median(activeAfter))} s, worst ${seconds(Math.max(...activeAfter))} s`,
    `  both instances sampled every ${POLL_MS} ms (${samples} samples): at most ${mostHolders} holding or connecting at once; ${overlaps === 0 ? 'the CRM never saw more subscriptions than one and one per kill' : `${overlaps} samples with two subscribers`}`,
    ''
  )
  process.stdout.write(['', ...lines].join('\n'))
  if (overlaps > 0) process.exitCode = 1
}

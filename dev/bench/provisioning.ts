import pg from 'pg'
import { randomUUID } from 'node:crypto'
import { build } from '../../app.js'
import { BillingClient } from '../../integrations/billing/client.js'
import type { UpstreamName } from '../../integrations/registry.js'
import { loadConfig } from '../../settings.js'
import { startSandbox, type Sandbox } from '../sandbox/index.js'
import { PgCountingProxy } from '../tools/pg-counting-proxy.js'
import { POSTGRES, deleteKeys, ownPeakRssMb } from './common.js'

const EVENTS = Number(process.env.BENCH_EVENTS ?? 300)
const DATABASE = 'postgres://postgres@127.0.0.1:5432/postgres'
// The latency of each upstream in the scenarios that show what bounds the rate.
const LATENCY_MS = 20

interface Scenario {
  name: string
  /** Added to every sandbox answer. */
  latencyMs: number
  settings: Record<string, string>
}

interface Outcome {
  ordersPerSecond: number
  seconds: number
  concurrency: { provisioning: number, billing: number, crm: number }
  /** Per order: calls and milliseconds spent in each step. */
  steps: Array<{ step: string, callsPerOrder: number, msPerOrder: number }>
  crmCallsPerOrder: number
  /** Per order: the rows of the orders table written, as PostgreSQL counts them. */
  writes: { inserts: number, updates: number }
  /**
   * Per order, on the wire, when counted: every statement the service sent from the events'
   * publication to the last order Active, each a transaction of its own (nothing on this path opens
   * a transaction block).
   */
  statements?: number
}

async function withClient<T> (work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: DATABASE })
  await client.connect()
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

async function seedOrders (sandbox: Sandbox): Promise<string[]> {
  const billing = new BillingClient({ url: sandbox.settings.BILLING_API_URL!, identifier: sandbox.settings.BILLING_API_IDENTIFIER!, secret: sandbox.settings.BILLING_API_SECRET! })
  try {
    const ids: string[] = []
    for (let i = 0; i < EVENTS; i++) {
      const { orderId } = await billing.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
      ids.push(sandbox.crm.putOrder({ Name: `Order ${orderId}`, Status: 'Pending Review', BillingOrderId__c: String(orderId), BillingClientId__c: '1', Product__c: '1' }))
    }
    return ids
  } finally {
    await billing.close()
  }
}

/**
 * Publishes EVENTS events at once and measures until every order is Active. Counted, the service's
 * statements go through a counting proxy, which shares this process's CPU: the times of such a run
 * are not reported.
 */
async function provision ({ latencyMs, settings }: Scenario, counted = false): Promise<Outcome> {
  const schema = `bench_${randomUUID().replaceAll('-', '')}`
  const keyPrefix = `bench:provisioning:${schema}:`
  await withClient((client) => client.query(`CREATE SCHEMA ${schema}`))
  const sandbox = await startSandbox({ crm: { streaming: { connectTimeoutMs: 1000 }, apiUsage: { used: 0, max: 10_000_000 } } })
  // The service's every statement goes through the counter; the bench's own do not.
  const proxy = counted ? await PgCountingProxy.start(POSTGRES.port) : undefined
  const { config } = loadConfig({
    ...sandbox.settings,
    NODE_ENV: 'bench',
    DATABASE_URL: `${proxy?.url('postgres') ?? DATABASE}?options=${encodeURIComponent(`-c search_path=${schema}`)}`,
    REDIS_KEY_PREFIX: keyPrefix,
    // Its connections' application name: the run's own, to tell when they have all ended.
    SERVICE_NAME: schema,
    LOG_LEVEL: 'warn',
    LOG_DIR: 'logs/bench',
    CRM_EVENTS_ENABLED: 'true',
    JWT_SECRET: 'bench-secret-that-is-at-least-32-chars',
    ...settings
  })
  const app = await build({ config, logToStdout: false })
  let closed = false
  try {
    while (app.platformEvents.subscription.stats().state !== 'connected') await new Promise((resolve) => setTimeout(resolve, 50))
    const ids = await seedOrders(sandbox)
    for (const simulator of [sandbox.billing, sandbox.crm, sandbox.telecom]) {
      if (latencyMs > 0) simulator.injectFault({ kind: 'latency', ms: latencyMs })
    }
    const databaseQueries = async () => (await app.monitoring.snapshot()).parts.database!.queries
    const before = { telecom: app.upstreams.telecom.calls.summary().count, billing: app.upstreams.billing.calls.summary().count, crm: app.upstreams.crm.calls.summary().count, queries: (await databaseQueries()).count }
    const statementsBefore = proxy?.queries ?? 0
    const started = performance.now()
    for (const id of ids) sandbox.crm.publishOrderProvisionRequested(id)
    await withClient(async (client) => {
      for (;;) {
        const { rows } = await client.query<{ active: string }>(`SELECT count(*) AS active FROM ${schema}.orders WHERE status = 'Active'`)
        if (Number(rows[0]?.active) >= EVENTS) break
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    })
    const seconds = (performance.now() - started) / 1000
    const statements = proxy === undefined ? undefined : (proxy.queries - statementsBefore) / EVENTS

    // Averages over each window, which holds every call of this run; counts since the events went out.
    const calls = (upstream: UpstreamName) => (app.upstreams[upstream].calls.summary().count - before[upstream]) / EVENTS
    const average = (upstream: UpstreamName) => app.upstreams[upstream].calls.summary().average ?? 0
    const queryWindow = await databaseQueries()
    const queries = (queryWindow.count - before.queries) / EVENTS
    const waits = { billing: app.upstreams.billing.queue.metrics().averageWaitTime, crm: app.upstreams.crm.queue.metrics().averageWaitTime }
    const outcome = {
      ordersPerSecond: EVENTS / seconds,
      seconds,
      concurrency: { provisioning: config.PROVISIONING_CONCURRENCY, billing: config.BILLING_QUEUE_CONCURRENCY, crm: config.CRM_QUEUE_CONCURRENCY },
      steps: [
        { step: 'telecom call (no queue)', callsPerOrder: calls('telecom'), msPerOrder: calls('telecom') * average('telecom') },
        { step: 'billing call', callsPerOrder: calls('billing'), msPerOrder: calls('billing') * average('billing') },
        { step: 'billing queue wait', callsPerOrder: calls('billing'), msPerOrder: calls('billing') * waits.billing },
        { step: 'CRM call (order read at hand-off, status at the end)', callsPerOrder: calls('crm'), msPerOrder: calls('crm') * average('crm') },
        { step: 'CRM queue wait', callsPerOrder: calls('crm'), msPerOrder: calls('crm') * waits.crm },
        { step: 'PostgreSQL query', callsPerOrder: queries, msPerOrder: queries * (queryWindow.average ?? 0) }
      ],
      crmCallsPerOrder: calls('crm'),
      statements
    }
    // A server process may hold its table counts until it ends; pg's pool does not wait for its
    // connections' ends, so their server processes are waited for.
    await app.close()
    closed = true
    const writes = await withClient(async (client) => {
      while (Number((await client.query<{ count: string }>('SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1', [`${schema}%`])).rows[0]?.count) > 0) {
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      const { rows } = await client.query<{ inserts: string, updates: string }>(
        "SELECT n_tup_ins AS inserts, n_tup_upd AS updates FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'orders'", [schema])
      return rows[0]
    })
    return { ...outcome, writes: { inserts: Number(writes?.inserts) / EVENTS, updates: Number(writes?.updates) / EVENTS } }
  } finally {
    if (!closed) await app.close()
    await proxy?.close()
    await sandbox.close()
    await withClient((client) => client.query(`DROP SCHEMA ${schema} CASCADE`))
    await deleteKeys(keyPrefix)
  }
}

function report (scenario: Scenario, outcome: Outcome): string[] {
  const { provisioning, billing, crm } = outcome.concurrency
  return [
    `  ${scenario.name}`,
    `    end to end:                     ${outcome.ordersPerSecond.toFixed(1)} orders/s (${EVENTS} orders in ${outcome.seconds.toFixed(1)} s)`,
    `    concurrency:                    provisioning ${provisioning}, billing queue ${billing}, CRM queue ${crm}`,
    '    where the time goes, per order:',
    ...outcome.steps.map(({ step, callsPerOrder, msPerOrder }) => `      ${step.padEnd(54)} ${callsPerOrder.toFixed(1)} x, ${msPerOrder.toFixed(1)} ms`),
    `    orders table, per order:        ${outcome.writes.inserts.toFixed(2)} rows inserted, ${outcome.writes.updates.toFixed(2)} row updates`
  ]
}

/**
 * Platform events to Active orders per second, end to end: the service subscribes, stores, queues
 * and provisions (telecom, billing, CRM) each order. With zero-latency upstreams, where the time
 * goes; with slower ones, that the rate follows the CRM queue's configured concurrency — the
 * upstream limit — and nothing of the service's own.
 */
export async function benchProvisioning (): Promise<void> {
  const zero: Scenario = { name: 'zero-latency sandbox, default settings', latencyMs: 0, settings: {} }
  const narrow: Scenario = { name: `${LATENCY_MS} ms upstreams, CRM queue concurrency 2`, latencyMs: LATENCY_MS, settings: { CRM_QUEUE_CONCURRENCY: '2' } }
  const wide: Scenario = { name: `${LATENCY_MS} ms upstreams, CRM queue concurrency 4`, latencyMs: LATENCY_MS, settings: { CRM_QUEUE_CONCURRENCY: '4' } }
  const lines = [`Provisioning: ${EVENTS} OrderProvisionRequested__e events published at once, to Active orders`]
  lines.push(...report(zero, await provision(zero)))
  const counted = await provision(zero, true)
  lines.push(`    statements on the wire:         ${counted.statements!.toFixed(2)} per order, each its own transaction (a run of its own through the counting proxy)`)
  const outcomes = { narrow: await provision(narrow), wide: await provision(wide) }
  for (const [scenario, outcome] of [[narrow, outcomes.narrow], [wide, outcomes.wide]] as const) {
    // Each CRM call holds a CRM queue slot for about the latency: that is the bound the settings set.
    const bound = outcome.concurrency.crm / (outcome.crmCallsPerOrder * (LATENCY_MS / 1000))
    lines.push(...report(scenario, outcome), `    the CRM queue's bound:          ${bound.toFixed(1)} orders/s (concurrency / (CRM calls per order x latency)); measured / bound ${(outcome.ordersPerSecond / bound).toFixed(2)}`)
  }
  lines.push(
    `  doubling the CRM queue's concurrency multiplied the rate by ${(outcomes.wide.ordersPerSecond / outcomes.narrow.ordersPerSecond).toFixed(2)}`,
    `  bench process peak RSS:           ${ownPeakRssMb().toFixed(0)} MB`,
    ''
  )
  process.stdout.write(['', ...lines].join('\n'))
}

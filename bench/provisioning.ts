import pg from 'pg'
import { randomUUID } from 'node:crypto'
import { build } from '../app.js'
import { BillingClient } from '../integrations/billing.js'
import { loadConfig } from '../lib/config.js'
import { startSandbox } from '../sandbox/index.js'

const EVENTS = Number(process.env.BENCH_EVENTS ?? 300)
const DATABASE = 'postgres://postgres@127.0.0.1:5432/postgres'

async function withClient<T> (work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: DATABASE })
  await client.connect()
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

/**
 * Platform events to Active orders per second, end to end, with zero-latency sandbox upstreams:
 * the service subscribes, stores, queues and provisions (telecom, billing, CRM) each order.
 */
export async function benchProvisioning (): Promise<void> {
  const schema = `bench_${randomUUID().replaceAll('-', '')}`
  await withClient((client) => client.query(`CREATE SCHEMA ${schema}`))
  const sandbox = await startSandbox({ crm: { streaming: { connectTimeoutMs: 1000 }, apiUsage: { used: 0, max: 10_000_000 } } })
  const { config } = loadConfig({
    ...sandbox.settings,
    NODE_ENV: 'bench',
    DATABASE_URL: `${DATABASE}?options=${encodeURIComponent(`-c search_path=${schema}`)}`,
    REDIS_KEY_PREFIX: `bench:${schema}:`,
    LOG_LEVEL: 'warn',
    LOG_DIR: 'logs/bench',
    CRM_EVENTS_ENABLED: 'true',
    JWT_SECRET: 'bench-secret-that-is-at-least-32-chars'
  })
  const app = await build({ config, logToStdout: false })
  const billing = new BillingClient({ url: config.BILLING_API_URL!, identifier: config.BILLING_API_IDENTIFIER!, secret: config.BILLING_API_SECRET! })
  try {
    while (app.eventSubscription.stats().state !== 'connected') await new Promise((resolve) => setTimeout(resolve, 50))
    const ids: string[] = []
    for (let i = 0; i < EVENTS; i++) {
      const { orderId } = await billing.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
      ids.push(sandbox.crm.putOrder({ Name: `Order ${orderId}`, Status: 'Pending Review', BillingOrderId__c: String(orderId), BillingClientId__c: '1', Product__c: '1' }))
    }
    const started = performance.now()
    for (const id of ids) sandbox.crm.publishOrderProvisionRequested(id)
    for (;;) {
      const { rows } = await app.pg.query<{ active: string }>("SELECT count(*) AS active FROM orders WHERE status = 'Active'")
      if (Number(rows[0]?.active) >= EVENTS) break
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    const seconds = (performance.now() - started) / 1000
    const step = (name: 'telecom' | 'billing' | 'crm') => app.upstreamCalls[name].summary().average?.toFixed(1) ?? '-'
    process.stdout.write([
      '',
      `Provisioning: ${EVENTS} OrderProvisionRequested__e events to Active orders, zero-latency sandbox upstreams`,
      `  end to end:                       ${(EVENTS / seconds).toFixed(1)} orders/s (${seconds.toFixed(1)} s)`,
      `  concurrency:                      provisioning ${config.PROVISIONING_CONCURRENCY}, billing queue ${config.BILLING_QUEUE_CONCURRENCY}, CRM queue ${config.CRM_QUEUE_CONCURRENCY}`,
      `  average upstream call, ms:        telecom ${step('telecom')}, billing ${step('billing')}, CRM ${step('crm')}`,
      `  CRM queue average wait / run, ms: ${app.crmQueue.metrics().averageWaitTime} / ${app.crmQueue.metrics().averageExecutionTime}`,
      `  billing queue average wait / run: ${app.billingQueue.metrics().averageWaitTime} / ${app.billingQueue.metrics().averageExecutionTime}`,
      `  RSS after:                        ${(process.memoryUsage().rss / 1048576).toFixed(0)} MB`,
      ''
    ].join('\n'))
  } finally {
    await billing.close()
    await app.close()
    await sandbox.close()
    await withClient((client) => client.query(`DROP SCHEMA ${schema} CASCADE`))
  }
}

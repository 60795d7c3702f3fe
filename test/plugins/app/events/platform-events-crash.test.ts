import t from 'tap'
import pg from 'pg'
import { request } from 'undici'
import { ensureTestDatabase, startTestSandbox, testEnv, testKeyPrefix, testSchemaUrl } from '../../../helpers/app.js'
import { waitFor } from '../../../helpers/processes.js'
import { provisioningOutcome, seedCrmOrders } from '../../../helpers/provisioning.js'
import { startService, type ServiceProcess } from '../../../helpers/service-process.js'
import type { Sandbox } from '../../../../dev/sandbox/index.js'

const STREAMING = { crm: { streaming: { connectTimeoutMs: 1000 } } }

async function serviceEnv (sandbox: Sandbox, prefix: string, databaseUrl: string) {
  return testEnv({
    ...sandbox.settings,
    DATABASE_URL: databaseUrl,
    REDIS_KEY_PREFIX: prefix,
    CRM_EVENTS_ENABLED: 'true',
    CRM_EVENTS_LEASE_TTL_MS: '6000',
    CRM_EVENTS_CONNECT_MARGIN_MS: '500',
    PROVISIONING_LOCK_MS: '3000',
    PROVISIONING_BACKOFF_MS: '200'
  })
}

async function activeCount (databaseUrl: string, crmOrderIds: string[]): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const { rows } = await client.query<{ count: string }>("SELECT count(*) FROM orders WHERE crm_order_id = ANY($1) AND status = 'Active'", [crmOrderIds])
    return Number(rows[0]?.count ?? 0)
  } finally {
    await client.end()
  }
}

async function subscriptionState (service: ServiceProcess): Promise<string> {
  const response = await request(`${service.url}/health/queues`)
  return ((await response.body.json()) as { events: { state: string } }).events.state
}

function kill (service: ServiceProcess): void {
  if (service.child.exitCode === null) service.child.kill('SIGKILL')
}

t.test('SIGKILL mid-stream, start again: every order Active exactly once', async (t) => {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t, STREAMING)
  const databaseUrl = await testSchemaUrl(t)
  const env = await serviceEnv(sandbox, testKeyPrefix(), databaseUrl)
  const first = await startService(env)
  t.teardown(() => kill(first))
  await waitFor('the subscription', async () => (await subscriptionState(first)) === 'connected', 15_000)

  const ids = await seedCrmOrders(sandbox, 40)
  sandbox.telecom.injectFault({ kind: 'latency', ms: 30 })
  for (const id of ids) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('some orders Active', async () => (await activeCount(databaseUrl, ids)) >= 5, 30_000)
  kill(first)
  await first.exit
  const before = await activeCount(databaseUrl, ids)
  t.ok(before < ids.length, `killed with ${before} of ${ids.length} Active`)

  const second = await startService(env)
  t.teardown(() => kill(second))
  await waitFor('every order Active', async () => (await activeCount(databaseUrl, ids)) === ids.length, 60_000).catch(async (error) => {
    const response = await request(`${second.url}/health/queues`)
    t.comment(JSON.stringify(await response.body.json()))
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    t.comment(JSON.stringify((await client.query('SELECT status, failure_reason, provisioning_attempts, count(*) FROM orders GROUP BY 1, 2, 3')).rows))
    await client.end()
    t.comment(second.lines.filter((line) => Number(line.level) >= 40).slice(0, 10).map((line) => JSON.stringify(line)).join('\n'))
    throw error
  })
  const outcome = provisioningOutcome(sandbox, ids)
  t.equal(outcome.distinctKeys, ids.length, 'distinct telecom keys = N')
  t.equal(outcome.activations, ids.length, 'one activation per order')
  t.equal(outcome.billingAccepted, ids.length, 'AcceptOrder succeeded once per order')
  t.equal(outcome.crmActivated, ids.length)
  second.child.kill('SIGTERM')
  t.equal(await second.exit, 0)
})

t.test('two instances: one subscriber at a time; the holder killed, the other takes over within 30 s', async (t) => {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t, STREAMING)
  const databaseUrl = await testSchemaUrl(t)
  const env = await serviceEnv(sandbox, testKeyPrefix(), databaseUrl)
  const services = [await startService(env), await startService(env)]
  t.teardown(() => services.forEach(kill))
  await waitFor('one subscription', async () => (await Promise.all(services.map(subscriptionState))).includes('connected'), 15_000)

  for (let i = 0; i < 10; i++) {
    const states = await Promise.all(services.map(subscriptionState))
    t.equal(states.filter((state) => state !== 'standby').length, 1, `one holder: ${states.join(', ')}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  const states = await Promise.all(services.map(subscriptionState))
  const holder = services[states.indexOf('connected')]!
  const other = services.find((service) => service !== holder)!

  const ids = await seedCrmOrders(sandbox, 10)
  for (const id of ids.slice(0, 5)) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('first half Active', async () => (await activeCount(databaseUrl, ids.slice(0, 5))) === 5, 30_000)

  kill(holder)
  const killedAt = performance.now()
  for (const id of ids.slice(5)) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('the other instance subscribed', async () => (await subscriptionState(other)) === 'connected', 30_000)
  const takeover = performance.now() - killedAt
  t.ok(takeover < 30_000, `took over in ${Math.round(takeover)} ms`)
  await waitFor('nothing lost', async () => (await activeCount(databaseUrl, ids)) === ids.length, 30_000)
  t.equal(provisioningOutcome(sandbox, ids).activations, ids.length)
})

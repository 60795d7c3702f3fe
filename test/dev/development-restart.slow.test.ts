import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { tempDir, testEnv, testSchemaUrl } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'
import { startService, type ServiceProcess } from '../helpers/service-process.js'

async function json (url: string, init: RequestInit = {}): Promise<Record<string, any>> {
  const response = await fetch(url, { ...init, headers: { 'content-type': 'application/json', ...init.headers } })
  if (!response.ok) throw new Error(`${init.method ?? 'GET'} ${url}: ${response.status}`)
  return await response.json() as Record<string, any>
}

async function stop (service: ServiceProcess): Promise<number | null> {
  service.child.kill('SIGTERM')
  return await service.exit
}

/** The development entry (`npm start`), with its sandbox, on the test's own database schema, Redis prefix and log directory. */
async function developmentStart (t: Test, env: Record<string, string>): Promise<ServiceProcess> {
  const service = await startService(env)
  t.teardown(() => { service.child.kill('SIGKILL') })
  await waitFor('the platform-event subscription', async () => (await json(`${service.url}/health/queues`)).events?.state === 'connected')
  return service
}

t.test('two development starts in a row write nothing to error.log, an order provisioned between them', async (t) => {
  const logDir = tempDir('logs')
  // The sandbox is the upstream, as with npm start; the environment a developer has by default.
  const env = testEnv({ NODE_ENV: 'development', LOG_DIR: logDir, DATABASE_URL: await testSchemaUrl(t) })
  delete (env as Record<string, string | undefined>).SHUTDOWN_DELAY_MS

  const first = await developmentStart(t, env)
  const { accessToken } = await json(`${first.url}/auth/login`, { method: 'POST', body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  const authorization = { authorization: `Bearer ${String(accessToken)}` }
  const order = await json(`${first.url}/api/orders`, { method: 'POST', headers: authorization, body: JSON.stringify({ productId: 1, billingCycle: 'monthly' }) })
  const crm = String(first.lines.find((line) => line.crm !== undefined)?.crm)
  await json(`${crm}/__sandbox/events`, { method: 'POST', body: JSON.stringify({ orderId: order.crmOrderId }) })
  await waitFor('the order Active', async () => (await json(`${first.url}/api/orders/${String(order.id)}`, { headers: authorization })).status === 'Active')
  t.equal(await stop(first), 0, 'the first run ends cleanly')

  const second = await developmentStart(t, env)
  t.equal(await stop(second), 0, 'the second run ends cleanly')

  const errors = existsSync(join(logDir, 'error.log')) ? readFileSync(join(logDir, 'error.log'), 'utf8') : ''
  t.equal(errors, '', 'error.log is empty')
})

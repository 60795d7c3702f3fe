import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { ensureTestDatabase, startTestSandbox, testEnv, testSchemaUrl } from '../../../helpers/app.js'
import { FAST_RECOVERY, placementViolations, storedPlacements } from '../../../helpers/placement.js'
import { waitFor } from '../../../helpers/processes.js'
import { startService, type ServiceProcess } from '../../../helpers/service-process.js'

// The contract's bound on a retry with the key after the placing instance died.
const TAKEOVER_BOUND_MS = 10_000

function kill (service: ServiceProcess): void {
  if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill('SIGKILL')
}

async function signIn (service: ServiceProcess): Promise<string> {
  const response = await fetch(`${service.url}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  return ((await response.json()) as { accessToken: string }).accessToken
}

function order (service: ServiceProcess, token: string, key: string): Promise<Response> {
  return fetch(`${service.url}/api/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'idempotency-key': key },
    body: JSON.stringify({ productId: 1, billingCycle: 'monthly' })
  })
}

/** Retries with the key, as a client that heeds retry-after does, until the answer is not 409. */
async function retried (service: ServiceProcess, token: string, key: string): Promise<Response> {
  for (;;) {
    const answer = await order(service, token, key)
    if (answer.status !== 409) return answer
    await sleep(Number(answer.headers.get('retry-after') ?? 1) * 1000)
  }
}

/** Two instances on one database and sandbox, Jane signed in; `overrides`: settings of both. */
async function twoInstances (t: Test, overrides: Record<string, string>) {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const databaseUrl = await testSchemaUrl(t)
  const env = testEnv({ ...sandbox.settings, ...FAST_RECOVERY, ...overrides, DATABASE_URL: databaseUrl })
  const doomed = await startService(env)
  const survivor = await startService(env)
  t.teardown(() => { kill(doomed); kill(survivor) })
  return { sandbox, databaseUrl, doomed, survivor, token: await signIn(survivor) }
}

/** Kills the instance while its request is under way: that request is never answered. */
async function killDuring (t: Test, doomed: ServiceProcess, placing: Promise<Response | undefined>): Promise<number> {
  doomed.child.kill('SIGKILL')
  const killedAt = performance.now()
  await doomed.exit
  t.equal(await placing, undefined, 'the placing request was never answered')
  return killedAt
}

t.test('the placing instance killed (SIGKILL) during the CRM create: a retry with its key on another instance answers 201 within 10 s; one AddOrder, one CRM order', async (t) => {
  // The CRM create's deadline longer than its latency, so that the kill comes while it is under way.
  const { sandbox, databaseUrl, doomed, survivor, token } = await twoInstances(t, { CRM_QUEUE_TIMEOUT_MS: '10000' })

  sandbox.crm.injectFault({ kind: 'latency', route: 'rest/sobjects/Order', ms: 3000, times: 1 })
  const placing = order(doomed, token, 'killed-1').catch(() => undefined)
  await waitFor('the CRM create under way', async () =>
    sandbox.crm.calls.some((call) => call.route === 'rest/sobjects/Order') && sandbox.crm.callsInProgress === 1, 10_000)
  const killedAt = await killDuring(t, doomed, placing)

  const answer = await retried(survivor, token, 'killed-1')
  const took = performance.now() - killedAt
  t.equal(answer.status, 201)
  t.ok(took <= TAKEOVER_BOUND_MS, `201 ${Math.round(took)} ms after the kill (bound ${TAKEOVER_BOUND_MS} ms)`)
  t.match(await answer.json(), { status: 'Pending Review', crmOrderId: sandbox.crm.orders[0]?.Id })
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 1, 'AddOrder once')
  t.equal(sandbox.crm.orders.length, 1, 'one CRM order')
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

t.test('the placing instance killed (SIGKILL) during AddOrder: a retry with its key on another instance finds the billing order it placed and answers 201 within 10 s; AddOrder once', async (t) => {
  const { sandbox, databaseUrl, doomed, survivor, token } = await twoInstances(t, { BILLING_QUEUE_TIMEOUT_MS: '10000' })
  // A first order: the floor that tells a lost answer's order apart.
  t.equal((await order(survivor, token, 'first-1')).status, 201)

  sandbox.billing.injectFault({ kind: 'latency', route: 'AddOrder', ms: 3000, times: 1 })
  const placing = order(doomed, token, 'killed-2').catch(() => undefined)
  await waitFor('AddOrder under way', async () => sandbox.billing.callsInProgress === 1, 10_000)
  const killedAt = await killDuring(t, doomed, placing)

  const answer = await retried(survivor, token, 'killed-2')
  const took = performance.now() - killedAt
  t.equal(answer.status, 201)
  t.ok(took <= TAKEOVER_BOUND_MS, `201 ${Math.round(took)} ms after the kill (bound ${TAKEOVER_BOUND_MS} ms)`)
  t.match(await answer.json(), { status: 'Pending Review', billingOrderId: sandbox.billing.orders[1]?.id, crmOrderId: String })
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 2, 'one AddOrder per key')
  t.same(sandbox.billing.orders.map((placed) => placed.status), ['Pending', 'Pending'])
  t.same(placementViolations(sandbox, await storedPlacements(databaseUrl)), [])
})

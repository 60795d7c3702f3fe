import t from 'tap'
import { ensureTestDatabase, startTestSandbox, testEnv, testSchemaUrl } from '../../../helpers/app.js'
import { FAST_RECOVERY, placementViolations, recovered, storedPlacements } from '../../../helpers/placement.js'
import { waitFor } from '../../../helpers/processes.js'
import { startService, type ServiceProcess } from '../../../helpers/service-process.js'

function kill (service: ServiceProcess): void {
  if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill('SIGKILL')
}

async function signIn (service: ServiceProcess): Promise<string> {
  const response = await fetch(`${service.url}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  return ((await response.json()) as { accessToken: string }).accessToken
}

function order (service: ServiceProcess, token: string): Promise<Response> {
  return fetch(`${service.url}/api/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ productId: 1, billingCycle: 'monthly' })
  })
}

t.test('an instance killed (SIGKILL) during AddOrder and during the CRM create: another instance cancels the one and links the other', async (t) => {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const databaseUrl = await testSchemaUrl(t)
  const env = testEnv({ ...sandbox.settings, ...FAST_RECOVERY, DATABASE_URL: databaseUrl })
  const doomed = await startService(env)
  t.teardown(() => kill(doomed))
  const token = await signIn(doomed)
  t.equal((await order(doomed, token)).status, 201, 'a first order goes through')

  // Each upstream takes its time, and makes its record even when its caller has gone.
  sandbox.billing.injectFault({ kind: 'latency', route: 'AddOrder', ms: 5000, times: 1 })
  sandbox.crm.injectFault({ kind: 'latency', route: 'rest/sobjects/Order', ms: 5000, times: 1 })
  const inBilling = order(doomed, token).catch(() => undefined)
  await waitFor('AddOrder under way', async () => sandbox.billing.callsInProgress === 1, 5000)
  const inCrm = order(doomed, token).catch(() => undefined)
  await waitFor('the CRM create under way', async () => sandbox.crm.callsInProgress === 1, 5000)
  kill(doomed)
  await doomed.exit
  t.same(await Promise.all([inBilling, inCrm]), [undefined, undefined], 'neither request was answered')
  await waitFor('the upstreams to make their records', async () => sandbox.billing.orders.length === 3 && sandbox.crm.orders.length === 2, 5000)
  t.same((await storedPlacements(databaseUrl)).map((row) => row.placement).sort(), ['billing', 'crm', 'placed'], 'two placements interrupted, one at each step')

  const survivor = await startService(env)
  t.teardown(() => kill(survivor))
  await recovered(sandbox, databaseUrl, 30_000)
  const stored = await storedPlacements(databaseUrl)
  t.same(placementViolations(sandbox, stored), [], 'every billing order goes on or is cancelled with its invoice')
  // The one held in AddOrder was placed last.
  t.same(sandbox.billing.orders.map((placed) => placed.status), ['Pending', 'Pending', 'Cancelled'], 'the one lost in AddOrder cancelled, the one whose CRM order exists goes on')
  t.equal(sandbox.crm.orders.length, 2, 'no second CRM order')
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 3, 'no AddOrder repeated')
  kill(survivor)
})

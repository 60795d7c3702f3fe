import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildTestApp, startTestSandbox } from '../../../helpers/app.js'
import { FAST_RECOVERY, ORDER, placementViolations, recovered, storedPlacements } from '../../../helpers/placement.js'
import { PrivatePostgres } from '../../../helpers/private-postgres.js'
import { waitFor } from '../../../helpers/processes.js'
import { placeOrder } from '../../../helpers/provisioning.js'
import { bearer, login } from '../../../helpers/tokens.js'

t.test('PostgreSQL stalled during placements (before, after AddOrder, after the CRM create): after recovery every billing order goes on or is cancelled, none twice', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { ...FAST_RECOVERY, DATABASE_URL: cluster.url, DATABASE_CONNECT_TIMEOUT_MS: '500', HEALTH_CHECK_TIMEOUT_MS: '500' }, sandbox)
  const token = await login(app)
  await placeOrder(app, token)
  const served = async () => (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode === 200
  /** A placement during which the database hangs `afterMs` after it began (0: before it began), for 2.5 s. */
  const stalledAt = async (afterMs: number) => {
    // Past the reuse time of the last check run.
    await sleep(1100)
    // A timer of 0 ms may fire after the order row is written on a loaded machine: hang first instead.
    if (afterMs === 0) cluster.hang()
    const answer = app.inject({ ...ORDER, headers: bearer(token) })
    if (afterMs > 0) {
      await sleep(afterMs)
      cluster.hang()
    }
    const response = await answer
    await sleep(Math.max(0, 2500 - afterMs))
    cluster.resume()
    await waitFor('the API served again', served)
    return response
  }

  const before = await stalledAt(0)
  t.equal(before.statusCode, 500, 'hung before the order row: 500')
  t.match(before.json(), { code: 'DATABASE_UNAVAILABLE' })
  t.equal(sandbox.billing.orders.length, 1, 'nothing asked of billing')

  // AddOrder takes 600 ms: the hang comes while billing places the order, so it cannot be recorded.
  sandbox.billing.injectFault({ kind: 'latency', route: 'AddOrder', ms: 600, times: 1 })
  const afterBilling = await stalledAt(300)
  t.equal(afterBilling.statusCode, 500, 'hung after AddOrder: 500')
  t.notMatch(afterBilling.body, /ECONN|timeout|postgres|at /i, 'no driver text, no stack')
  t.equal(sandbox.billing.orders[1]?.status, 'Cancelled', 'the billing order it could not record is cancelled at once')

  // The CRM create takes 300 ms: the hang comes while the CRM makes the order, so it cannot be linked.
  sandbox.crm.injectFault({ kind: 'latency', route: 'rest/sobjects/Order', ms: 300, times: 1 })
  const afterCrm = await stalledAt(150)
  t.equal(afterCrm.statusCode, 500, 'hung after the CRM create: 500')

  await recovered(sandbox, cluster.url)
  const stored = await storedPlacements(cluster.url)
  t.same(placementViolations(sandbox, stored), [], 'every billing order goes on or is cancelled with its invoice')
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending', 'Cancelled', 'Pending'])
  t.equal(sandbox.crm.orders.length, 2, 'one CRM order per order that goes on: the recovery linked, never created again')
  t.equal(new Set(sandbox.billing.orders.map((order) => order.invoiceid)).size, 3, 'one invoice per billing order')
  t.equal(stored.filter((order) => order.placement === 'placed').length, 2)
})

import t from 'tap'
import { ORDER, placementTestApp } from '../../../helpers/placement.js'
import { waitFor } from '../../../helpers/processes.js'
import { placeOrder } from '../../../helpers/provisioning.js'
import { bearer, login } from '../../../helpers/tokens.js'

t.test('the CRM down at create: 503 ORDER_INCOMPLETE; once it answers, the recovery cancels the billing order', async (t) => {
  const { sandbox, app, token, recovered } = await placementTestApp(t)
  await placeOrder(app, token)
  await sandbox.crm.down()
  const response = await app.inject({ ...ORDER, headers: bearer(token) })
  t.match(response.json(), { statusCode: 503, code: 'ORDER_INCOMPLETE' })
  // While the CRM cannot say whether the order exists, nothing is decided.
  await new Promise((resolve) => setTimeout(resolve, 1500))
  t.equal(sandbox.billing.orders[1]?.status, 'Pending', 'undecided while the CRM is down')
  await sandbox.crm.up()
  await recovered()
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending', 'Cancelled'], 'the first goes on, the second is cancelled')
})

t.test('an AddOrder answer lost after billing placed the order: 503 BILLING_UNAVAILABLE, then the recovery finds it among the client\'s pending orders and cancels it', async (t) => {
  const { sandbox, app, token, recovered } = await placementTestApp(t)
  const first = await placeOrder(app, token)
  // Another client's pending order is never taken for it.
  const john = await login(app, 'john@example.com', 'battery-staple')
  await placeOrder(app, john)
  sandbox.billing.injectFault({ kind: 'latency', route: 'AddOrder', ms: 1500, times: 1 })
  const response = await app.inject({ ...ORDER, headers: bearer(token) })
  t.match(response.json(), { statusCode: 503, code: 'BILLING_UNAVAILABLE' })
  await waitFor('billing placed it after all', async () => sandbox.billing.orders.length === 3, 5000)
  await recovered()
  const [lost, john1, jane1] = [...sandbox.billing.orders].reverse()
  t.equal(lost?.status, 'Cancelled', 'the lost one is cancelled')
  t.same([jane1?.id, jane1?.status, john1?.status], [first.billingOrderId, 'Pending', 'Pending'], 'the others go on')
})

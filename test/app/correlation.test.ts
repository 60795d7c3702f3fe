import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox, tempDir } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'
import { bearer, login } from '../helpers/tokens.js'

const linesOf = (logDir: string, file: string) =>
  readFileSync(join(logDir, file), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)

t.test('billing answering 500: every error line of the request carries its correlation id, and so did the upstream call, with no trace', async (t) => {
  const sandbox = await startTestSandbox(t)
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { LOG_DIR: logDir }, sandbox)
  const token = await login(app)
  sandbox.billing.injectFault({ kind: 'http5xx', status: 500 })
  const correlationId = 'trace-4711'
  const response = await app.inject({ url: '/api/invoices', headers: { ...bearer(token), 'x-correlation-id': correlationId } })
  t.equal(response.statusCode, 503)
  await app.close()

  const errors = linesOf(logDir, 'error.log')
  t.ok(errors.length >= 2, `${errors.length} error lines: the upstream's failure and the request's`)
  t.ok(errors.some((line) => line.upstream === 'billing' && line.failure === 'http_5xx'), 'the upstream failure is among them')
  t.same(errors.filter((line) => line.correlationId !== correlationId).map((line) => line.message), [], 'every one carries the request\'s id, none "system"')

  const call = sandbox.billing.calls.at(-1)!
  t.equal(call.headers['x-correlation-id'], correlationId, 'the upstream call carried the id')
  t.equal(call.headers.traceparent, undefined, 'and no traceparent: with tracing off no trace is kept, so none is named')
})

t.test('an order\'s provisioning logs under the order\'s id: grep one id from hand-off to Active', async (t) => {
  const sandbox = await startTestSandbox(t)
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { LOG_DIR: logDir, CRM_EVENTS_ENABLED: 'true' }, sandbox)
  const order = (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(await login(app)), payload: { productId: 1, billingCycle: 'monthly' } })).json()
  await waitFor('the subscription', async () => app.platformEvents.subscription.stats().state === 'connected')
  sandbox.crm.publishOrderProvisionRequested(order.crmOrderId)
  await waitFor('the order Active', async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Active')
  const activation = sandbox.telecom.calls.find((call) => call.path.endsWith('/v1/activations'))
  await app.close()

  const workId = `order:${order.crmOrderId}`
  const lines = linesOf(logDir, 'combined.log').filter((line) => line.correlationId === workId)
  t.ok(lines.some((line) => line.message === 'provisioning requested'), 'the hand-off')
  t.ok(lines.some((line) => line.message === 'order provisioned'), 'and the provisioning, under the same id')
  t.equal(activation?.headers['x-correlation-id'], workId, 'the telecom call carried it')
})

import t from 'tap'
import { Queue, Worker } from 'bullmq'
import { placeOrder } from '../../../helpers/provisioning.js'
import { buildTestApp, startTestSandbox, testKeyPrefix, testSchemaUrl } from '../../../helpers/app.js'
import { PROVISIONING_QUEUE } from '../../../../plugins/app/orders/provisioning-job.js'
import { waitFor } from '../../../helpers/processes.js'
import { login } from '../../../helpers/tokens.js'

t.test('a provisioning job takes the order to Active, each step once', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const order = await placeOrder(app, await login(app))
  await app.orders.jobs.enqueue(order.crmOrderId)
  await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('Active', async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Active')
  const stored = await app.orders.store.findByCrmId(order.crmOrderId)
  t.match(stored, { status: 'Active', telecomActivationId: String, msisdn: String, billingAcceptedAt: String, crmActivatedAt: String, provisioningAttempts: 1 })
  t.equal(sandbox.crm.order(order.crmOrderId)?.Status, 'Activated')
  t.same(sandbox.telecom.idempotencyKeys.map((use) => use.key), [order.crmOrderId], 'the telecom key is the CRM order id, used once')
  t.equal(sandbox.billing.orders.find((placed) => placed.id === order.billingOrderId)?.status, 'Active')
  // The order is Active a moment before BullMQ marks its job completed.
  await waitFor('the job completed', async () => (await app.inject('/health/queues')).json().jobs.completed === 1)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { health: 'healthy', completed: 1, failed: 0, waiting: 0, active: 0 }, 'the duplicate made no second job')
})

t.test('a retry after a lost AcceptOrder answer reconciles instead of failing', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_BACKOFF_MS: '50' }, sandbox)
  const order = await placeOrder(app, await login(app))
  // The order is accepted but the answer never arrives: the next attempt sees "not Pending".
  sandbox.billing.injectFault({ kind: 'http5xx', status: 502, after: true, times: 1, route: 'AcceptOrder' })
  await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('Active', async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Active')
  t.match(await app.orders.store.findByCrmId(order.crmOrderId), { status: 'Active', provisioningAttempts: 2 })
  t.equal(sandbox.telecom.activations.length, 1, 'the telecom step was not repeated')
})

t.test('the same, with GetOrders refused to the API role: the order not pending is taken as accepted, with a warning', async (t) => {
  const refusals = [
    { kind: 'error' as const, route: 'GetOrders', status: 403, message: 'Invalid Permissions: API action "getorders" is not allowed' },
    { kind: 'error' as const, route: 'GetOrders', message: 'Command Not Found' }
  ]
  for (const refusal of refusals) {
    const sandbox = await startTestSandbox(t)
    const app = await buildTestApp(t, { PROVISIONING_BACKOFF_MS: '50' }, sandbox)
    const warnings: string[] = []
    const warn = app.log.warn.bind(app.log)
    app.log.warn = ((details: object, message: string) => { warnings.push(message); warn(details, message) }) as typeof app.log.warn
    const order = await placeOrder(app, await login(app))
    sandbox.billing.injectFault({ kind: 'http5xx', status: 502, after: true, times: 1, route: 'AcceptOrder' })
    sandbox.billing.injectFault(refusal)
    await app.orders.jobs.enqueue(order.crmOrderId)
    await waitFor('Active', async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Active')
    t.match(await app.orders.store.findByCrmId(order.crmOrderId), { status: 'Active', provisioningAttempts: 2 }, refusal.message)
    t.ok(warnings.some((message) => message.includes('GetOrders is refused: taken as accepted')))
  }
})

t.test('telecom always failing: retries, then Failed with the reason; jobs health follows, then recovers', async (t) => {
  const sandbox = await startTestSandbox(t)
  // A short health window, so the failures age out of it within the test.
  const windowMs = 15_000
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '3', PROVISIONING_BACKOFF_MS: '20', QUEUE_HEALTH_WINDOW_MS: String(windowMs) }, sandbox)
  const token = await login(app)
  sandbox.telecom.injectFault({ kind: 'http5xx', status: 500 })
  const placed: Array<{ crmOrderId: string }> = []
  for (let i = 0; i < 6; i++) placed.push(await placeOrder(app, token))
  for (const order of placed) await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('all Failed', async () => {
    const stored = await Promise.all(placed.map((order) => app.orders.store.findByCrmId(order.crmOrderId)))
    return stored.every((order) => order?.status === 'Failed')
  }, 30_000)
  const first = placed[0]!
  const failed = await app.orders.store.findByCrmId(first.crmOrderId)
  t.match(failed, { status: 'Failed', failureReason: /^http_5xx: /, provisioningAttempts: 3 })
  // The order is stored Failed first, then the reason goes to the CRM through its queue.
  await waitFor('the reason in the CRM', async () => sandbox.crm.order(first.crmOrderId)?.Provisioning_Error__c != null)
  t.match(sandbox.crm.order(first.crmOrderId), { Provisioning_Error__c: /http_5xx/ }, 'the reason is written to the CRM')
  t.equal(sandbox.telecom.calls.filter((call) => call.path === '/v1/activations').length, 18, 'three attempts each')
  await waitFor('the jobs failed', async () => (await app.inject('/health/queues')).json().jobs.failed === 6)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { failed: 6, recentFailed: 6, health: 'degraded' }, '6 failed jobs: degraded (> 5)')
  await waitFor('the failures out of the window', async () => (await app.inject('/health/queues')).json().jobs.recentFailed === 0, windowMs + 15_000)
  t.match((await app.inject('/health/queues')).json().jobs, { failed: 6, recentFailed: 0, health: 'healthy' }, 'the failed jobs are kept, yet an old incident no longer degrades the queue')
})

t.test('telecom or the CRM refusing connections during provisioning: retried, then Failed with connection_refused', async (t) => {
  for (const upstream of ['telecom', 'crm'] as const) {
    const sandbox = await startTestSandbox(t)
    const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '2', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
    const order = await placeOrder(app, await login(app))
    await sandbox[upstream].down()
    await app.orders.jobs.enqueue(order.crmOrderId)
    await waitFor(`Failed with ${upstream} down`, async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Failed', 30_000)
    t.match(await app.orders.store.findByCrmId(order.crmOrderId), { status: 'Failed', failureReason: /^connection_refused: /, provisioningAttempts: 2 }, `${upstream} down: two attempts, then Failed with the class`)
    t.equal(sandbox.telecom.activations.length, upstream === 'telecom' ? 0 : 1, `${upstream} down: the telecom step ${upstream === 'telecom' ? 'never happened' : 'happened once, not per attempt'}`)
    await sandbox[upstream].up()
  }
})

t.test('telecom rate-limiting (429) during provisioning: the attempts are retried, one activation once the limit lifts', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '5', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
  const order = await placeOrder(app, await login(app))
  sandbox.telecom.injectFault({ kind: 'error', status: 429, code: 'rate_limit_error', message: 'Too many requests', times: 2, route: 'activations' })
  await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('Active', async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Active', 15_000)
  t.match(await app.orders.store.findByCrmId(order.crmOrderId), { status: 'Active', provisioningAttempts: 3, failureReason: null }, 'two refused attempts, then the third')
  t.equal(sandbox.telecom.activations.length, 1, 'one activation')
  t.equal(sandbox.telecom.calls.filter((call) => call.path === '/v1/activations').length, 3, 'three calls, each under the same idempotency key')
  t.same([...new Set(sandbox.telecom.idempotencyKeys.map((use) => use.key))], [order.crmOrderId])
})

t.test('the CRM over its quota during provisioning: the CRM step is retried, then the order Failed with quota_exceeded', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { PROVISIONING_ATTEMPTS: '3', PROVISIONING_BACKOFF_MS: '20' }, sandbox)
  const token = await login(app)
  const placed = [await placeOrder(app, token), await placeOrder(app, token)]
  const usage = sandbox.crm.apiUsage
  sandbox.crm.setApiUsage({ used: usage.max })
  for (const order of placed) await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('both Failed', async () => {
    const stored = await Promise.all(placed.map((order) => app.orders.store.findByCrmId(order.crmOrderId)))
    return stored.every((order) => order?.status === 'Failed')
  }, 30_000)
  const failed = await app.orders.store.findByCrmId(placed[0]!.crmOrderId)
  t.match(failed, { status: 'Failed', failureReason: /^quota_exceeded: /, provisioningAttempts: 3 })
  t.not(failed?.telecomActivationId, null, 'the steps before the CRM were done, once')
  t.equal(sandbox.telecom.activations.filter((activation) => activation.orderId === placed[0]!.crmOrderId).length, 1, 'one activation, not one per attempt')
  sandbox.crm.setApiUsage(usage)
})

t.test('a job whose worker ended with it twice is failed by BullMQ unrun: the order is Failed, not left Provisioning', async (t) => {
  const sandbox = await startTestSandbox(t)
  const shared = { DATABASE_URL: await testSchemaUrl(t), REDIS_KEY_PREFIX: testKeyPrefix() }
  const placing = await buildTestApp(t, shared, sandbox)
  const order = await placeOrder(placing, await login(placing))
  await placing.close()

  // A worker that holds the job without renewing its lock, as a process killed while provisioning:
  // BullMQ's stalled check takes the job back twice, and the second time marks it to fail.
  const connection = { host: '127.0.0.1', port: 6379 }
  const prefix = `${shared.REDIS_KEY_PREFIX}bull`
  const queue = new Queue(PROVISIONING_QUEUE, { connection, prefix })
  const dying = new Worker(PROVISIONING_QUEUE, async () => await new Promise(() => {}), { connection, prefix, concurrency: 2, skipLockRenewal: true, lockDuration: 300, stalledInterval: 200, maxStalledCount: 1 })
  t.teardown(async () => {
    await dying.close(true)
    await queue.close()
  })
  await queue.add('provision', { crmOrderId: order.crmOrderId }, { jobId: order.crmOrderId })
  await waitFor('the job marked to fail', async () => (await queue.getJob(order.crmOrderId))?.deferredFailure !== undefined, 10_000)
  await dying.close(true)

  const app = await buildTestApp(t, shared, sandbox)
  await waitFor('the order Failed', async () => (await app.orders.store.findByCrmId(order.crmOrderId))?.status === 'Failed', 10_000)
  t.match(await app.orders.store.findByCrmId(order.crmOrderId), { status: 'Failed', failureReason: /^stalled: job stalled more than allowable limit/ })
  t.equal(sandbox.telecom.activations.length, 0, 'nothing was provisioned')
  // Written to the CRM after the order's own status.
  await waitFor('the CRM order says why', async () => /stalled/.test(String(sandbox.crm.order(order.crmOrderId)?.Provisioning_Error__c)))
})

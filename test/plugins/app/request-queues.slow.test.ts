import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { UpstreamRefusal } from '../../../lib/errors.js'
import { RequestQueue } from '../../../lib/request-queue.js'
import { buildTestApp, startTestSandbox, testKeyPrefix } from '../../helpers/app.js'
import { waitFor } from '../../helpers/processes.js'
import type { FastifyInstance } from 'fastify'

async function queues (app: FastifyInstance) {
  return (await app.inject('/health/queues')).json()
}

function billingCall (app: FastifyInstance) {
  return app.upstreams.billing.queue.run((deadline) => app.upstreams.billing.client.health(deadline))
}

/** A queue without an app, for what the queue itself guarantees. */
function unitQueue (options: { concurrency: number, timeoutMs?: number }) {
  return new RequestQueue({
    name: 'billing',
    timeoutMs: 5000,
    maxSize: 10,
    windowMs: 60_000,
    ...options
  })
}

t.test('queue metrics follow a slow upstream at concurrency 1', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_QUEUE_CONCURRENCY: '1' }, sandbox)
  sandbox.billing.injectFault({ kind: 'latency', ms: 200 })

  const calls = Array.from({ length: 4 }, () => billingCall(app))
  await sleep(50)
  const during = await queues(app)
  t.equal(during.billing.metrics.pendingRequests, 1, 'one in flight')
  t.equal(during.billing.metrics.queueSize, 3, 'three waiting')
  t.equal(during.billing.metrics.totalRequests, 4)

  await Promise.all(calls)
  const after = await queues(app)
  t.match(after, { timestamp: /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/ })
  t.match(after.billing.metrics, { totalRequests: 4, completedRequests: 4, failedRequests: 0, queueSize: 0, pendingRequests: 0 })
  t.ok(after.billing.metrics.averageExecutionTime >= 200, `averageExecutionTime ${after.billing.metrics.averageExecutionTime} ms`)
  // Waits were about 0, 200, 400 and 600 ms.
  t.ok(after.billing.metrics.averageWaitTime >= 250, `averageWaitTime ${after.billing.metrics.averageWaitTime} ms`)
  t.ok(Object.values(after.billing.metrics).every(Number.isInteger), 'every metric is an integer')
  t.equal(after.billing.health, 'healthy')
  t.same(after.crm.metrics.totalRequests, 0, 'the CRM queue is separate')
})

t.test('health crosses to degraded and unhealthy at the thresholds of the specification, and comes back', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { QUEUE_HEALTH_WINDOW_MS: '2000' }, sandbox)
  sandbox.billing.injectFault({ kind: 'http5xx', status: 503 })

  const fail = async (times: number) => {
    const results = await Promise.allSettled(Array.from({ length: times }, () => billingCall(app)))
    t.ok(results.every((result) => result.status === 'rejected'), `${times} calls failed`)
  }
  await fail(5)
  t.equal((await queues(app)).billing.health, 'healthy', '5 failures: still healthy (> 5 warns)')
  await fail(1)
  const warned = await queues(app)
  t.equal(warned.billing.health, 'degraded', '6 failures: degraded')
  t.equal(warned.billing.metrics.failedRequests, 6, 'failures count')
  await fail(15)
  t.equal((await queues(app)).billing.health, 'unhealthy', '21 failures: unhealthy')
  const detail = (await app.inject('/health/queues/billing')).json()
  t.match(detail, { name: 'billing', health: 'unhealthy', level: 'critical', recentFailedRequests: 21, thresholds: { failedRequests: { warning: 5, critical: 20 } } })

  sandbox.billing.clearFaults()
  await waitFor('the window to pass', async () => (await queues(app)).billing.health === 'healthy', 5000)
  const recovered = await queues(app)
  t.equal(recovered.billing.metrics.failedRequests, 21, 'the counter is cumulative while health follows the window')
})

t.test('queue size drives health too; a full queue rejects at once', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_QUEUE_CONCURRENCY: '1', BILLING_QUEUE_MAX_SIZE: '60', BILLING_QUEUE_TIMEOUT_MS: '150000', UPSTREAM_TIMEOUT_MS: '120000' }, sandbox)
  // The first call holds its slot unanswered until the simulator's connections end below: the
  // others wait while the queue is read, however busy the machine.
  sandbox.billing.injectFault({ kind: 'blackhole', times: 1 })
  const calls: Array<Promise<unknown>> = []
  const enqueue = (n: number) => { for (let i = 0; i < n; i++) calls.push(billingCall(app).catch(() => {})) }

  enqueue(11)
  await sleep(20)
  t.equal((await queues(app)).billing.metrics.queueSize, 10)
  t.equal((await queues(app)).billing.health, 'healthy', '10 waiting: healthy')
  enqueue(1)
  t.equal((await queues(app)).billing.health, 'degraded', '11 waiting: degraded')
  enqueue(40)
  t.equal((await queues(app)).billing.health, 'unhealthy', '51 waiting: unhealthy')
  enqueue(9)
  await t.rejects(billingCall(app), { name: 'QueueFullError' }, 'one past the maximum is rejected')
  t.equal((await queues(app)).billing.metrics.queueSize, 60, 'at once: while the queue is still full, not after a turn')
  sandbox.billing.clearFaults()
  await sandbox.billing.down()
  await sandbox.billing.up()
  await Promise.all(calls)
  t.equal((await queues(app)).billing.health, 'healthy', 'drained: healthy again')
})

t.test('with no room to wait (maxSize 0), requests run while a slot is free and are refused at once when none is', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_QUEUE_CONCURRENCY: '2', BILLING_QUEUE_MAX_SIZE: '0' }, sandbox)
  t.equal(await billingCall(app).then(() => 'answered'), 'answered', 'an idle queue runs the request')
  sandbox.billing.injectFault({ kind: 'latency', ms: 300 })
  const running = [billingCall(app), billingCall(app)]
  t.match((await queues(app)).billing.metrics, { pendingRequests: 2, queueSize: 0 }, 'both slots taken, nothing waits')
  await t.rejects(billingCall(app), { name: 'QueueFullError' }, 'a third has nowhere to go')
  await Promise.all(running)
  t.match((await queues(app)).billing.metrics, { completedRequests: 3, failedRequests: 1 })
})

t.test('a black-holed upstream is bounded by the queue deadline', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_QUEUE_TIMEOUT_MS: '400' }, sandbox)
  sandbox.billing.injectFault({ kind: 'blackhole' })
  const started = performance.now()
  await t.rejects(billingCall(app), { name: 'UpstreamFailure', message: /did not complete within 400 ms/ })
  const elapsed = performance.now() - started
  t.ok(elapsed < 650, `gave up after ${Math.round(elapsed)} ms`)
  t.equal((await queues(app)).billing.metrics.failedRequests, 1)
})

t.test('requests whose deadline passes while they wait leave the queue then, and free no slot twice', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_QUEUE_CONCURRENCY: '1', BILLING_QUEUE_TIMEOUT_MS: '300' }, sandbox)
  sandbox.billing.injectFault({ kind: 'blackhole' })
  const started = performance.now()
  const calls = Array.from({ length: 3 }, () => billingCall(app).then(() => 'answered', (error: Error) => error.message))
  await sleep(50)
  t.match((await queues(app)).billing.metrics, { queueSize: 2, pendingRequests: 1 }, 'one runs, two wait')
  t.same(await Promise.all(calls), Array(3).fill('billing request did not complete within 300 ms'), 'each gives up at its deadline')
  // After their turns they would give up at 600 ms and 900 ms.
  t.ok(performance.now() - started < 580, 'the waiting ones too, not after their turn')
  t.equal((await queues(app)).billing.metrics.queueSize, 0, 'nothing counts as waiting')
  sandbox.billing.clearFaults()
  await waitFor('the slot freed', async () => (await queues(app)).billing.metrics.pendingRequests === 0, 2000)
  t.equal(await billingCall(app).then(() => 'answered'), 'answered', 'the queue serves again')
  t.match((await queues(app)).billing.metrics, { failedRequests: 3, completedRequests: 1, totalRequests: 4 })
})

t.test('averageWaitTime counts the waits that ended at the deadline, the longest of all', async (t) => {
  const queue = unitQueue({ concurrency: 1, timeoutMs: 300 })
  // A task that ignores its deadline holds the one slot past the waiters' deadlines.
  const calls = Array.from({ length: 3 }, () => queue.run(() => sleep(600)).catch(() => 'gave up'))
  t.same(await Promise.all(calls), Array(3).fill('gave up'))
  const { averageWaitTime } = queue.metrics()
  t.ok(averageWaitTime >= 190 && averageWaitTime < 400, `one started at once, two waited 300 ms: average ${averageWaitTime} ms`)
  await queue.drain()
})

t.test('CRM daily usage comes from the CRM and is one figure for all instances', async (t) => {
  const sandbox = await startTestSandbox(t, { crm: { apiUsage: { used: 120, max: 15000 } } })
  const prefix = testKeyPrefix()
  const first = await buildTestApp(t, { REDIS_KEY_PREFIX: prefix, CRM_DAILY_API_LIMIT: '999' }, sandbox)
  const second = await buildTestApp(t, { REDIS_KEY_PREFIX: prefix, CRM_DAILY_API_LIMIT: '999' }, sandbox)

  await first.upstreams.crm.queue.run((deadline) => first.upstreams.crm.client.getOrder('801000000000001AAA', deadline))
  const usage = sandbox.crm.apiUsage
  // The client records the figure without waiting for Redis; the other instance reads it from there.
  await waitFor('the shared figure', async () => (await queues(second)).crm.dailyUsage.used === usage.used)
  const fromFirst = (await queues(first)).crm.dailyUsage
  const fromSecond = (await queues(second)).crm.dailyUsage
  t.same(fromFirst, { used: usage.used, limit: usage.max }, 'equals the sandbox api-usage after a call')
  t.same(fromSecond, fromFirst, 'the other instance reports the same figure')
  const detail = (await second.inject('/health/queues/crm')).json()
  t.match(detail.dailyUsage, { used: usage.used, limit: 15000, limitSource: 'crm', level: 'ok' })
  t.equal(detail.dailyUsage.percent, Number(((100 * usage.used) / usage.max).toFixed(2)))
})

t.test('CRM_DAILY_API_LIMIT stands in only until the CRM has answered', async (t) => {
  const sandbox = await startTestSandbox(t)
  sandbox.crm.injectFault({ kind: 'http5xx', status: 503 })
  const app = await buildTestApp(t, { CRM_DAILY_API_LIMIT: '5000' }, sandbox)
  const before = (await app.inject('/health/queues/crm')).json()
  t.match(before.dailyUsage, { limit: 5000, limitSource: 'configured' })
  sandbox.crm.clearFaults()
  await app.upstreams.crm.queue.run((deadline) => app.upstreams.crm.client.getLimits(deadline))
  const after = (await app.inject('/health/queues/crm')).json()
  t.match(after.dailyUsage, { limit: sandbox.crm.apiUsage.max, limitSource: 'crm' })
  t.not(after.dailyUsage.limit, 5000)
})

/** A task the test ends: it records its start and resolves with its index when told. */
function heldTasks (count: number) {
  const started: number[] = []
  const finish: Array<() => void> = []
  const tasks = Array.from({ length: count }, (_, index) => () => new Promise<number>((resolve) => {
    started.push(index)
    finish[index] = () => resolve(index)
  }))
  return { started, finish, tasks }
}

t.test('waiting requests start oldest first, never more than the concurrency at once', async (t) => {
  const queue = unitQueue({ concurrency: 2 })
  const { started, finish, tasks } = heldTasks(5)
  const results = tasks.map((task) => queue.run(task))
  t.same(started, [0, 1], 'two slots: the first two start at once')
  t.match(queue.metrics(), { pendingRequests: 2, queueSize: 3 })

  finish[1]!()
  await waitFor('a slot passed on', async () => started.length === 3, 1000)
  t.same(started, [0, 1, 2], 'the freed slot goes to the oldest waiting')
  finish[0]!()
  finish[2]!()
  await waitFor('both slots passed on', async () => started.length === 5, 1000)
  t.same(started, [0, 1, 2, 3, 4], 'then the next in the order they came')
  t.match(queue.metrics(), { pendingRequests: 2, queueSize: 0 })

  finish[3]!()
  finish[4]!()
  t.same(await Promise.all(results), [0, 1, 2, 3, 4], 'each caller gets its own task\'s result')
  t.match(queue.metrics(), { totalRequests: 5, completedRequests: 5, failedRequests: 0, pendingRequests: 0, queueSize: 0 })
})

t.test('a waiting request whose deadline passes leaves the line; an overrunning task keeps its slot until it ends', async (t) => {
  const queue = unitQueue({ concurrency: 1, timeoutMs: 300 })
  const { started, finish, tasks } = heldTasks(3)
  const outcome = (promise: Promise<number>) => promise.then((index) => index, (error: Error) => error.message)
  const overrun = outcome(queue.run(tasks[0]!))
  const expiring = outcome(queue.run(tasks[1]!))
  await sleep(150)
  const next = outcome(queue.run(tasks[2]!))
  t.same(await Promise.all([overrun, expiring]), Array(2).fill('billing request did not complete within 300 ms'), 'the running one and the one waiting since then give up at their deadline')
  t.match(queue.metrics(), { pendingRequests: 1, queueSize: 1 }, 'the overrunning task still holds the slot; only the later one waits')
  await sleep(20)
  t.same(started, [0], 'the later one waits for the slot, not for the deadline')
  finish[0]!()
  await waitFor('the slot passed on', async () => started.length === 2, 1000)
  t.same(started, [0, 2], 'the slot goes to the one still waiting; the one that left never runs')
  finish[2]!()
  t.equal(await next, 2)
  t.match(queue.metrics(), { totalRequests: 3, completedRequests: 1, failedRequests: 2, pendingRequests: 0, queueSize: 0 })
})

t.test('a caller that has its answer finds the slot free again', async (t) => {
  const queue = unitQueue({ concurrency: 1 })
  t.equal(await queue.run(async () => 'first'), 'first')
  t.match(queue.metrics(), { pendingRequests: 0, queueSize: 0 }, 'nothing counts as running')
  const { started, finish, tasks } = heldTasks(1)
  const second = queue.run(tasks[0]!)
  t.same(started, [0], 'the next request starts at once, without waiting in line')
  finish[0]!()
  t.equal(await second, 0)
})

t.test('a refusal by the upstream rejects the request but counts as completed', async (t) => {
  const queue = unitQueue({ concurrency: 1 })
  await t.rejects(queue.run(async () => { throw new UpstreamRefusal('billing', 'no such product') }), { name: 'UpstreamRefusal', message: 'no such product' })
  await t.rejects(queue.run(async () => { throw new Error('broken') }), { message: 'broken' })
  t.match(queue.metrics(), { totalRequests: 2, completedRequests: 1, failedRequests: 1 })
  t.equal(queue.recentFailures(), 1, 'only the failure counts toward health')
})

t.test('a task that throws at once is a failed request and frees its slot', async (t) => {
  const queue = unitQueue({ concurrency: 1 })
  const thrown = queue.run(() => { throw new Error('broken before its first await') })
  const next = queue.run(async () => 'ran')
  await t.rejects(thrown, { message: 'broken before its first await' })
  t.equal(await next, 'ran')
  t.match(queue.metrics(), { totalRequests: 2, completedRequests: 1, failedRequests: 1, pendingRequests: 0 })
})

t.test('drain waits for what runs and waits, and no longer than a request may take', async (t) => {
  const idle = unitQueue({ concurrency: 1 })
  const startedIdle = performance.now()
  await idle.drain()
  t.ok(performance.now() - startedIdle < 50, 'an idle queue drains at once')

  const queue = unitQueue({ concurrency: 1 })
  const { finish, tasks } = heldTasks(2)
  const results = tasks.map((task) => queue.run(task))
  let drained = false
  const draining = queue.drain().then(() => { drained = true })
  finish[0]!()
  await waitFor('the waiting one started', async () => queue.metrics().pendingRequests === 1 && queue.metrics().queueSize === 0, 1000)
  await sleep(20)
  t.notOk(drained, 'not drained while the second still runs')
  finish[1]!()
  await draining
  t.same(await Promise.all(results), [0, 1])

  const stuck = unitQueue({ concurrency: 1, timeoutMs: 200 })
  stuck.run(() => new Promise(() => {})).catch(() => {})
  const startedStuck = performance.now()
  await stuck.drain()
  const waited = performance.now() - startedStuck
  t.ok(waited >= 150 && waited < 600, `a task that never ends holds drain for the queue timeout only: ${Math.round(waited)} ms`)
})

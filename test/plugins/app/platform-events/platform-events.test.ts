import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox, tempDir, testKeyPrefix, testSchemaUrl } from '../../../helpers/app.js'
import { PrivatePostgres } from '../../../helpers/private-postgres.js'
import { PrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { allActive, EVENTS_ON, eventsReport, provisioningOutcome, seedCrmOrders, STREAMING } from '../../../helpers/provisioning.js'
import type { FastifyInstance } from 'fastify'
import type { Sandbox } from '../../../../dev/sandbox/index.js'

async function connected (app: FastifyInstance, sandbox: Sandbox) {
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected' && sandbox.crm.streamingStats.subscribes > 0, 10_000)
}

t.test('100 events: 100 orders Active, each step once; the replay key holds the last replayId', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 100)
  let lastReplayId = 0
  for (const id of ids) lastReplayId = sandbox.crm.publishOrderProvisionRequested(id)

  await waitFor('100 orders Active', () => allActive(app, ids), 60_000)
  t.same(provisioningOutcome(sandbox, ids), { activations: 100, distinctKeys: 100, keysUsedOnce: 100, billingAccepted: 100, crmActivated: 100 })
  await waitFor('the replay position', async () => (await app.redis.get(app.platformEvents.subscription.replayKey)) === String(lastReplayId))
  t.equal(app.platformEvents.subscription.replayKey, `${app.config.REDIS_KEY_PREFIX}crm:pe:replay:/event/OrderProvisionRequested__e`)
  await waitFor('the holder report', async () => (await eventsReport(app)).holder?.replayId === lastReplayId)
  t.match(await eventsReport(app), { state: 'connected', received: 100, replayId: lastReplayId, lastError: null, holder: { state: 'connected', replayId: lastReplayId } })
  const check = (await app.inject('/auth/health-check')).json()
  t.match(check.checks.events, { status: 'ok' }, 'the events check passes while connected')
})

t.test('an event naming an order the CRM does not have is parked: nothing stored or provisioned, the stream moves on', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await connected(app, sandbox)
  const [known] = await seedCrmOrders(sandbox, 1)
  const unknown = '801000000000999AAA'
  sandbox.crm.publishOrderProvisionRequested(unknown)
  const lastReplayId = sandbox.crm.publishOrderProvisionRequested(known!)
  await waitFor('the known order Active', () => allActive(app, [known!]), 30_000)
  t.equal(await app.orders.store.findByCrmId(unknown), null, 'no order stored for the unknown one')
  t.equal(sandbox.telecom.activations.length, 1, 'one activation: the known order\'s')
  t.equal((await app.inject('/health/queues')).json().jobs.failed, 0, 'no job made and failed for it')
  await waitFor('the replay position past both', async () => (await app.redis.get(app.platformEvents.subscription.replayKey)) === String(lastReplayId))
  t.equal((await eventsReport(app)).parked, 1, 'parked, for an operator to discard')
})

t.test('PostgreSQL stopped when the first events arrive: the batch is refused; once it is back every order is provisioned once, none from before the start', async (t) => {
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const sandbox = await startTestSandbox(t, STREAMING)
  // Retained by the CRM, but published before the subscription starts from the latest event.
  const [earlier] = await seedCrmOrders(sandbox, 1)
  sandbox.crm.publishOrderProvisionRequested(earlier!)
  const app = await buildTestApp(t, { ...EVENTS_ON, DATABASE_URL: cluster.url, DATABASE_CONNECT_TIMEOUT_MS: '500', DATABASE_QUERY_TIMEOUT_MS: '1000' }, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 4)
  t.equal(await app.redis.get(app.platformEvents.subscription.replayKey), null, 'no position stored yet: nothing has been handed off')
  await cluster.stop()
  for (const id of ids) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('the batch refused', async () => (await eventsReport(app)).lastError === 'events_rejected', 15_000)
  t.equal(await app.redis.get(app.platformEvents.subscription.replayKey), null, 'no position stored for events that were not handed off')
  await cluster.start()
  await waitFor('every order Active', () => allActive(app, ids), 60_000)
  t.same(provisioningOutcome(sandbox, ids), { activations: 4, distinctKeys: 4, keysUsedOnce: 4, billingAccepted: 4, crmActivated: 4 }, 'each step once')
  t.equal(await app.orders.store.findByCrmId(earlier!), null, 'the event from before the subscription started is still left alone, as LATEST says')
  t.ok((await eventsReport(app)).reconnects >= 1, 'the stream handshook again to get the batch redelivered')
})

t.test('Redis down when the first events arrive: the batch is refused, its floor kept until Redis is back; then every order is provisioned once', async (t) => {
  const redis = await PrivateRedis.start({ persistent: true })
  t.teardown(() => redis.kill())
  const sandbox = await startTestSandbox(t, STREAMING)
  const [earlier] = await seedCrmOrders(sandbox, 1)
  sandbox.crm.publishOrderProvisionRequested(earlier!)
  // A lease renewed every 3 s: the batch arrives well before the renewal notices Redis is gone.
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { ...EVENTS_ON, CRM_EVENTS_LEASE_TTL_MS: '9000', REDIS_URL: redis.url, LOG_DIR: logDir }, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 3)
  await redis.stop()
  const [firstReplayId] = ids.map((id) => sandbox.crm.publishOrderProvisionRequested(id))
  // From the log: the subscription's own figures are reset once the lease renewal stops it.
  const refused = () => readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').some((line) => line.includes('"failure":"events_rejected"'))
  await waitFor('the batch refused', async () => refused(), 15_000)
  await redis.start()
  await waitFor('every order Active', () => allActive(app, ids), 60_000)
  t.same(provisioningOutcome(sandbox, ids), { activations: 3, distinctKeys: 3, keysUsedOnce: 3, billingAccepted: 3, crmActivated: 3 }, 'each step once')
  t.equal(await app.redis.get(app.platformEvents.subscription.floorKey), String(firstReplayId), 'the floor was stored once Redis answered')
  t.equal(await app.orders.store.findByCrmId(earlier!), null, 'the event from before the subscription started is still left alone')
})

t.test('a batch is handed off a chunk at a time, CRM_QUEUE_CONCURRENCY events at once', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, CRM_QUEUE_CONCURRENCY: '4' }, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 8)
  // Slow order reads hold the hand-offs in flight long enough to count them.
  sandbox.crm.injectFault({ kind: 'latency', ms: 300, route: 'rest' })
  for (const id of ids) sandbox.crm.publishOrderProvisionRequested(id)
  let mostAtOnce = 0
  await waitFor('the first chunk in flight', async () => {
    mostAtOnce = Math.max(mostAtOnce, app.upstreams.crm.queue.metrics().pendingRequests)
    return mostAtOnce === 4
  }, 5000)
  t.equal(mostAtOnce, 4, 'four order reads in flight together, not one after another')
  t.equal(app.upstreams.crm.queue.metrics().queueSize, 0, 'and no more than a chunk: nothing waits in the CRM queue')
  sandbox.crm.clearFaults()
  await waitFor('8 orders Active', () => allActive(app, ids), 30_000)
})

t.test('duplicated and replayed events never make a second job', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, CRM_EVENTS_REPLAY: 'ALL' }, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 5)
  for (const id of [...ids, ...ids]) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('Active', () => allActive(app, ids), 30_000)
  // Forget the position, and its copy in PostgreSQL: the next subscription replays every retained event (CRM_EVENTS_REPLAY=ALL).
  await app.redis.del(app.platformEvents.subscription.replayKey)
  await app.pg.query('DELETE FROM event_replay_positions')
  sandbox.crm.dropAllSessions()
  await waitFor('the replay', async () => (await eventsReport(app)).received >= 20, 20_000)
  await waitFor('the jobs settled', async () => (await app.inject('/health/queues')).json().jobs.active === 0)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { completed: 5, failed: 0, waiting: 0, active: 0 }, 'one job per order')
  t.same(provisioningOutcome(sandbox, ids), { activations: 5, distinctKeys: 5, keysUsedOnce: 5, billingAccepted: 5, crmActivated: 5 })
})

t.test('events carrying the 15-character form of an order id reach the same order: one row, one job, one activation', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await connected(app, sandbox)
  const [storedFirst, announcedShort] = await seedCrmOrders(sandbox, 2) as [string, string]
  const short = (id: string) => id.slice(0, 15)
  // One order known by its 18-character id before an event names it by 15; the other the other way round.
  const published = [storedFirst, short(storedFirst), short(announcedShort), announcedShort]
  for (const [index, id] of published.entries()) {
    sandbox.crm.publishOrderProvisionRequested(id)
    await waitFor('the event handed off', async () => (await eventsReport(app)).received >= index + 1)
  }
  await waitFor('Active', () => allActive(app, [storedFirst, announcedShort]), 30_000)
  await waitFor('the jobs settled', async () => (await app.inject('/health/queues')).json().jobs.active === 0)
  t.match((await app.inject('/health/queues')).json().jobs, { completed: 2, failed: 0, waiting: 0 }, 'one job per order')
  // Sorted here: PostgreSQL's collation orders letters of either case otherwise than JavaScript does.
  const { rows } = await app.pg.query<{ crm_order_id: string }>('SELECT crm_order_id FROM orders')
  t.same(rows.map((row) => row.crm_order_id).sort(), [storedFirst, announcedShort].sort(), 'one row each, under the CRM\'s 18-character id')
  t.same(provisioningOutcome(sandbox, [storedFirst, announcedShort]), { activations: 2, distinctKeys: 2, keysUsedOnce: 2, billingAccepted: 2, crmActivated: 2 })
  const reads = (id: string) => sandbox.crm.calls.filter((call) => call.method === 'GET' && call.path.endsWith(`/sobjects/Order/${id}`)).length
  t.equal(reads(short(storedFirst)), 0, 'the short form of a stored order is found without asking the CRM')
})

/** A connected subscription and `count` orders, the first half of them provisioned already. */
async function firstHalfActive (t: Test, count: number) {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, count)
  const half = Math.floor(count / 2)
  for (const id of ids.slice(0, half)) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('first half', () => allActive(app, ids.slice(0, half)), 30_000)
  return { sandbox, app, ids, rest: ids.slice(half) }
}

t.test('the CRM drops every session: resubscribed from the stored position, nothing lost', async (t) => {
  const { sandbox, app, ids, rest } = await firstHalfActive(t, 10)
  const handshakes = sandbox.crm.streamingStats.handshakes
  sandbox.crm.dropAllSessions()
  for (const id of rest) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('all', () => allActive(app, ids), 30_000)
  t.ok(sandbox.crm.streamingStats.handshakes > handshakes, 'handshook again')
  t.same(provisioningOutcome(sandbox, ids).activations, 10)
  t.ok((await eventsReport(app)).reconnects >= 1)
})

t.test('the CRM refusing connections: the subscription fails loudly, backs off, and resumes from the stored position', async (t) => {
  const { sandbox, app, ids, rest } = await firstHalfActive(t, 6)
  await sandbox.crm.down()
  await waitFor('the subscription failed', async () => (await eventsReport(app)).state === 'failed', 10_000)
  const check = (await app.inject('/auth/health-check')).json()
  t.match(check.checks.events, { status: 'fail', error: 'connection_refused' }, 'the events check fails while nobody is subscribed, with the stream\'s failure class')
  for (const id of rest) sandbox.crm.publishOrderProvisionRequested(id)
  await sandbox.crm.up()
  await waitFor('the rest provisioned', () => allActive(app, ids), 60_000)
  t.equal(provisioningOutcome(sandbox, ids).activations, 6, 'nothing lost, nothing twice')
  t.equal((await eventsReport(app)).state, 'connected')
})

t.test('connects stop being answered: the watchdog re-handshakes, the gap shows, later events are provisioned', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await connected(app, sandbox)
  // A first event stores a replay position, from which the stream resumes after the gap.
  const [first, later] = await seedCrmOrders(sandbox, 2)
  sandbox.crm.publishOrderProvisionRequested(first!)
  await waitFor('the first provisioned', () => allActive(app, [first!]), 30_000)
  const states = new Set<string>()
  const watch = setInterval(() => { eventsReport(app).then((report) => states.add(report.state), () => {}) }, 100)
  t.teardown(() => clearInterval(watch))
  const handshakes = sandbox.crm.streamingStats.handshakes
  sandbox.crm.stopAnsweringConnects()
  // Advised timeout 1000 ms plus the 500 ms margin, then a handshake: the connect the CRM never
  // answers is given up by the client's own timeout (lastError 'timeout' below), not waited out.
  await waitFor('a new handshake', async () => sandbox.crm.streamingStats.handshakes > handshakes, 30_000)
  t.pass('re-handshook')
  sandbox.crm.publishOrderProvisionRequested(later!)
  sandbox.crm.resumeAnsweringConnects()
  await waitFor('the event published during the gap provisioned', () => allActive(app, [later!]), 30_000)
  t.ok([...states].some((state) => state !== 'connected'), `the gap showed: ${[...states].join(', ')}`)
  t.match(await eventsReport(app), { state: 'connected', lastError: 'timeout' })
})

t.test('an invalid stored replayId falls back per CRM_EVENTS_REPLAY, logged at level 50', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const [old] = await seedCrmOrders(sandbox, 1)
  const expired = sandbox.crm.publishOrderProvisionRequested(old!)
  sandbox.crm.expireEventsThrough(expired)
  const logDir = tempDir('logs')
  const prefix = testKeyPrefix()
  const redisKey = `${prefix}crm:pe:replay:/event/OrderProvisionRequested__e`
  // Two instances of one deployment share Redis and the database.
  const databaseUrl = await testSchemaUrl(t)
  const app = await buildTestApp(t, { ...EVENTS_ON, CRM_EVENTS_ENABLED: 'false', REDIS_KEY_PREFIX: prefix, DATABASE_URL: databaseUrl }, sandbox)
  await app.redis.set(redisKey, String(expired))
  // Retained, but after the stored (expired) position: the fallback to -2 (ALL) replays it.
  const [fresh] = await seedCrmOrders(sandbox, 1)
  sandbox.crm.publishOrderProvisionRequested(fresh!)
  const subscriber = await buildTestApp(t, { ...EVENTS_ON, CRM_EVENTS_REPLAY: 'ALL', REDIS_KEY_PREFIX: prefix, LOG_DIR: logDir, DATABASE_URL: databaseUrl }, sandbox)
  await waitFor('the retained event provisioned', () => allActive(subscriber, [fresh!]), 30_000)
  const errors = readFileSync(join(logDir, 'error.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line))
  t.ok(errors.some((line) => line.level === 50 && String(line.message).includes(String(expired))), 'the invalid replayId is logged at 50')
  t.not(await subscriber.redis.get(redisKey), String(expired), 'the stored position moved on')
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox, tempDir, testSchemaUrl } from './helpers/app.js'
import { waitFor } from './helpers/processes.js'
import { provisioningOutcome, seedCrmOrders } from './helpers/provisioning.js'
import type { FastifyInstance } from 'fastify'
import type { Sandbox } from '../sandbox/index.js'

const STREAMING = { crm: { streaming: { connectTimeoutMs: 1000 } } }
const EVENTS_ON = { CRM_EVENTS_ENABLED: 'true', CRM_EVENTS_CONNECT_MARGIN_MS: '500', CRM_EVENTS_LEASE_TTL_MS: '3000' }

async function allActive (app: FastifyInstance, crmOrderIds: string[]): Promise<boolean> {
  const orders = await Promise.all(crmOrderIds.map((id) => app.orders.findByCrmId(id)))
  return orders.every((order) => order?.status === 'Active')
}

async function events (app: FastifyInstance) {
  return (await app.inject('/health/queues')).json().events
}

async function connected (app: FastifyInstance, sandbox: Sandbox) {
  await waitFor('the subscription', async () => (await events(app)).state === 'connected' && sandbox.crm.streamingStats.subscribes > 0, 10_000)
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
  await waitFor('the replay position', async () => (await app.redis.get(app.eventSubscription.replayKey)) === String(lastReplayId))
  t.equal(app.eventSubscription.replayKey, `${app.config.REDIS_KEY_PREFIX}crm:pe:replay:/event/OrderProvisionRequested__e`)
  await waitFor('the holder report', async () => (await events(app)).holder?.replayId === lastReplayId)
  t.match(await events(app), { state: 'connected', received: 100, replayId: lastReplayId, lastError: null, holder: { state: 'connected', replayId: lastReplayId } })
  const check = (await app.inject('/auth/health-check')).json()
  t.match(check.checks.events, { status: 'ok' }, 'the events check passes while connected')
})

t.test('duplicated and replayed events never make a second job', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, { ...EVENTS_ON, CRM_EVENTS_REPLAY: 'ALL' }, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 5)
  for (const id of [...ids, ...ids]) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('Active', () => allActive(app, ids), 30_000)
  // Forget the position: the next subscription replays every retained event (CRM_EVENTS_REPLAY=ALL).
  await app.redis.del(app.eventSubscription.replayKey)
  sandbox.crm.dropAllSessions()
  await waitFor('the replay', async () => (await events(app)).received >= 20, 20_000)
  await waitFor('the jobs settled', async () => (await app.inject('/health/queues')).json().jobs.active === 0)
  const jobs = (await app.inject('/health/queues')).json().jobs
  t.match(jobs, { completed: 5, failed: 0, waiting: 0, active: 0 }, 'one job per order')
  t.same(provisioningOutcome(sandbox, ids), { activations: 5, distinctKeys: 5, keysUsedOnce: 5, billingAccepted: 5, crmActivated: 5 })
})

t.test('the CRM drops every session: resubscribed from the stored position, nothing lost', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await connected(app, sandbox)
  const ids = await seedCrmOrders(sandbox, 10)
  for (const id of ids.slice(0, 5)) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('first half', () => allActive(app, ids.slice(0, 5)), 30_000)
  const handshakes = sandbox.crm.streamingStats.handshakes
  sandbox.crm.dropAllSessions()
  for (const id of ids.slice(5)) sandbox.crm.publishOrderProvisionRequested(id)
  await waitFor('all', () => allActive(app, ids), 30_000)
  t.ok(sandbox.crm.streamingStats.handshakes > handshakes, 'handshook again')
  t.same(provisioningOutcome(sandbox, ids).activations, 10)
  t.ok((await events(app)).reconnects >= 1)
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
  const watch = setInterval(() => { events(app).then((report) => states.add(report.state), () => {}) }, 100)
  t.teardown(() => clearInterval(watch))
  const handshakes = sandbox.crm.streamingStats.handshakes
  sandbox.crm.stopAnsweringConnects()
  const started = performance.now()
  // Advised timeout 1000 ms plus the 500 ms margin, then a handshake.
  await waitFor('a new handshake', async () => sandbox.crm.streamingStats.handshakes > handshakes, 5000)
  t.ok(performance.now() - started < 1000 + 500 + 1500, `re-handshook after ${Math.round(performance.now() - started)} ms`)
  sandbox.crm.publishOrderProvisionRequested(later!)
  sandbox.crm.resumeAnsweringConnects()
  await waitFor('the event published during the gap provisioned', () => allActive(app, [later!]), 30_000)
  t.ok([...states].some((state) => state !== 'connected'), `the gap showed: ${[...states].join(', ')}`)
  t.match(await events(app), { state: 'connected', lastError: 'timeout' })
})

t.test('an invalid stored replayId falls back per CRM_EVENTS_REPLAY, logged at level 50', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const [old] = await seedCrmOrders(sandbox, 1)
  const expired = sandbox.crm.publishOrderProvisionRequested(old!)
  sandbox.crm.expireEventsThrough(expired)
  const logDir = tempDir('logs')
  const prefix = `test:${Date.now()}:replay:`
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

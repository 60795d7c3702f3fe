import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Queue } from 'bullmq'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox, tempDir } from '../../../helpers/app.js'
import { PrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { allActive, EVENTS_ON, eventsReport, provisioningOutcome, seedCrmOrders, STREAMING } from '../../../helpers/provisioning.js'
import { PROVISIONING_QUEUE } from '../../../../plugins/app/orders/provisioning-job.js'

// Redis without persistence, killed and started again empty: the replay position, the queued jobs,
// the lease are gone. CRM_EVENTS_REPLAY is left unset (LATEST), as the operator had it.

async function mirroredPosition (app: FastifyInstance): Promise<number | null> {
  const { rows } = await app.pg.query<{ replay_id: string }>('SELECT replay_id FROM event_replay_positions')
  return rows[0] === undefined ? null : Number(rows[0].replay_id)
}

function logLines (logDir: string, text: string): Array<Record<string, unknown>> {
  return readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => Number(line.level) >= 40 && String(line.message).includes(text))
}

async function subscribedApp (t: Test, overrides: Record<string, string> = {}) {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const sandbox = await startTestSandbox(t, STREAMING)
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { ...EVENTS_ON, REDIS_URL: redis.url, LOG_DIR: logDir, ...overrides }, sandbox)
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected', 10_000)
  return { redis, sandbox, logDir, app }
}

t.test('events published while Redis was away are replayed from the position PostgreSQL mirrors: each order provisioned once, no restart', async (t) => {
  const { redis, sandbox, logDir, app } = await subscribedApp(t)
  const [first, ...gap] = await seedCrmOrders(sandbox, 4) as [string, ...string[]]
  const firstReplayId = sandbox.crm.publishOrderProvisionRequested(first)
  await waitFor('the first order Active', () => allActive(app, [first]), 15_000)
  await waitFor('its position mirrored', async () => await mirroredPosition(app) === firstReplayId)

  await redis.kill()
  await waitFor('the subscription stopped', async () => (await eventsReport(app)).state !== 'connected', 10_000)
  // The holder cannot read its report back from Redis: its own word, not the connected state it last wrote.
  const holderState = async () => /^portal_bff_event_subscription_holder_state\{state="([a-z]+)"\} 1$/m.exec((await app.inject('/metrics')).body)?.[1]
  await waitFor('the holder state failed in /metrics', async () => await holderState() === 'failed', 10_000)
  const lastReplayId = gap.map((id) => sandbox.crm.publishOrderProvisionRequested(id)).at(-1)
  await redis.start()

  await waitFor('the orders of the gap Active', () => allActive(app, gap), 30_000)
  t.same(provisioningOutcome(sandbox, [first, ...gap]), { activations: 4, distinctKeys: 4, keysUsedOnce: 4, billingAccepted: 4, crmActivated: 4 }, 'each step once')
  await waitFor('the position past the gap, in both stores', async () =>
    await app.redis.get(app.platformEvents.subscription.replayKey) === String(lastReplayId) && await mirroredPosition(app) === lastReplayId)
  t.equal((await eventsReport(app)).state, 'connected', 'subscribed again by itself')
  const resumed = logLines(logDir, 'resuming from the one PostgreSQL mirrors')
  t.equal(resumed.length, 1, 'the resumption said once')
  t.match(resumed[0], { level: 40, replayId: firstReplayId }, 'at warn, with the position')
})

t.test('jobs Redis lost with its data are queued again: an order in Provisioning and one handed off but not started, each provisioned once', async (t) => {
  // A failed attempt waits a minute for its retry: long enough for Redis to lose the delayed job.
  const { redis, sandbox, logDir, app } = await subscribedApp(t, { PROVISIONING_BACKOFF_MS: '60000', PROVISIONING_ATTEMPTS: '3' })
  const [retrying, waiting] = await seedCrmOrders(sandbox, 2) as [string, string]
  sandbox.telecom.injectFault({ kind: 'http5xx', times: 1 })
  sandbox.crm.publishOrderProvisionRequested(retrying)
  await waitFor('the first attempt failed', async () => (await app.inject('/health/queues')).json().jobs?.delayed === 1, 15_000)
  t.match(await app.orders.store.findByCrmId(retrying), { status: 'Provisioning', provisioningAttempts: 1 })

  // Paused, the queue keeps the next job queued and unstarted.
  const queue = new Queue(PROVISIONING_QUEUE, { connection: { host: '127.0.0.1', port: redis.port }, prefix: `${app.config.REDIS_KEY_PREFIX}bull` })
  await queue.pause()
  const handedOff = sandbox.crm.publishOrderProvisionRequested(waiting)
  await waitFor('the second order handed off', async () => await mirroredPosition(app) === handedOff, 15_000)
  t.match(await app.orders.store.findByCrmId(waiting), { status: 'Pending Review', provisioningAttempts: 0 }, 'its job queued, not started')
  await queue.close()

  await redis.restartEmpty()
  await waitFor('both orders Active', () => allActive(app, [retrying, waiting]), 30_000)
  t.same(provisioningOutcome(sandbox, [retrying, waiting]), { activations: 2, distinctKeys: 2, keysUsedOnce: 2, billingAccepted: 2, crmActivated: 2 }, 'each step once')
  t.match(await app.orders.store.findByCrmId(retrying), { provisioningAttempts: 2 }, 'the failed attempt and the one after Redis came back')
  t.match(await app.orders.store.findByCrmId(waiting), { provisioningAttempts: 1 })
  const requeued = logLines(logDir, 'queueing again the jobs')
  t.equal(requeued.length, 1, 'the re-queueing said once')
  t.match(requeued[0], { level: 40, orders: 2 }, 'at warn, with the count')
  t.equal(await mirroredPosition(app), handedOff, 'no replay brought them back: the position had passed both events')
})

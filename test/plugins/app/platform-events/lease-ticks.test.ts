import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox, testKeyPrefix } from '../../../helpers/app.js'
import { PrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { ORDER_PROVISION_CHANNEL } from '../../../../plugins/app/platform-events/subscription.js'
import { subscriptionKeys } from '../../../../plugins/app/redis-keys.js'

// A lease tick (renewal or acquisition) that lasts longer than the renewal period: the next one must
// neither run beside it nor wait so long that the lease lapses.

const LEASE_TTL_MS = 2000

/** Every state the subscription passes through until the returned function is called. */
function sampleStates (app: FastifyInstance): () => Set<string> {
  const states = new Set<string>()
  const timer = setInterval(() => states.add(app.platformEvents.subscription.stats().state), 10)
  return () => {
    clearInterval(timer)
    return states
  }
}

/** An instance holding the subscription, whose next resubscription's old connection takes 1 s to end. */
async function holderWithSlowDisconnect (t: Test) {
  const sandbox = await startTestSandbox(t)
  const prefix = testKeyPrefix()
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true', CRM_EVENTS_LEASE_TTL_MS: String(LEASE_TTL_MS), REDIS_KEY_PREFIX: prefix }, sandbox)
  const subscription = app.platformEvents.subscription
  await waitFor('the subscription', async () => (await subscription.holder())?.state === 'connected')
  // Its /meta/disconnect is handled but never answered: the old stream ends at the disconnect's bound.
  sandbox.crm.injectFault({ kind: 'blackhole', route: 'cometd/meta/disconnect', after: true, times: 1 })
  return { sandbox, app, subscription, keys: subscriptionKeys(prefix, ORDER_PROVISION_CHANNEL) }
}

t.test('a resubscription whose old connection takes two renewal periods to end: the holder keeps its lease and token, and stays subscribed', async (t) => {
  const { sandbox, app, subscription, keys } = await holderWithSlowDisconnect(t)
  const held = await app.redis.get(keys.lease)
  t.match(held, `${subscription.instance}#`, 'this instance holds the lease')

  const handshakes = sandbox.crm.streamingStats.handshakes
  const states = sampleStates(app)
  t.ok(await subscription.requestResubscribe(60_000), 'a resubscription asked for')
  await waitFor('subscribed again', async () => sandbox.crm.streamingStats.handshakes > handshakes && subscription.stats().state === 'connected')
  // Past the lease's expiry, had a renewal been skipped or the lease given up.
  await sleep(LEASE_TTL_MS + subscription.renewEveryMs)
  const seen = states()
  t.equal(await app.redis.get(keys.lease), held, 'the same lease, with the same fencing token: never given up nor taken anew')
  t.notOk(seen.has('standby'), `never standing by (states seen: ${[...seen].join(', ')})`)
  t.equal(subscription.stats().state, 'connected')
  t.equal(sandbox.crm.streamingClientCount, 1, 'one connection to the CRM')
})

t.test('stopped during a slow resubscription: stop() waits for it, lets the lease go, and no subscription starts after', async (t) => {
  const { sandbox, app, subscription, keys } = await holderWithSlowDisconnect(t)
  t.ok(await subscription.requestResubscribe(60_000), 'a resubscription asked for')
  await waitFor('the resubscription under way', async () => subscription.stats().state === 'connecting', 5000)
  // Within the old connection's unanswered disconnect, at least one renewal period later.
  await sleep(subscription.renewEveryMs + 100)
  const handshakes = sandbox.crm.streamingStats.handshakes
  await subscription.stop()
  t.equal(await app.redis.get(keys.lease), null, 'the lease let go')
  await sleep(LEASE_TTL_MS)
  t.equal(sandbox.crm.streamingStats.handshakes, handshakes, 'no subscription started after stop()')
  t.equal(sandbox.crm.streamingClientCount, 0, 'no connection left to the CRM')
  t.equal(subscription.stats().state, 'standby')
})

/**
 * An instance on a private Redis of its own, which a test may hang: standing by while another instance
 * holds the lease, or (`free`) taking it.
 */
async function onOwnRedis (t: Test, leaseTtlMs: number, commandTimeoutMs: number, { free = false } = {}) {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const sandbox = await startTestSandbox(t)
  const prefix = testKeyPrefix()
  const keys = subscriptionKeys(prefix, ORDER_PROVISION_CHANNEL)
  const client = redis.client(t)
  if (!free) await client.set(keys.lease, 'another-host:1:0000#1', 'PX', 60_000)
  const app = await buildTestApp(t, {
    CRM_EVENTS_ENABLED: 'true',
    CRM_EVENTS_LEASE_TTL_MS: String(leaseTtlMs),
    REDIS_COMMAND_TIMEOUT_MS: String(commandTimeoutMs),
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: prefix
  }, sandbox)
  return { redis, client, keys, app, subscription: app.platformEvents.subscription }
}

t.test('a standby instance whose acquisition waits on a Redis that hangs past a renewal period: it takes the free lease once and keeps it', async (t) => {
  // Redis commands may take 5 s here; the lease is above 4/3 of that, renewed every 2 s.
  const { redis, client, keys, app, subscription } = await onOwnRedis(t, 8000, 5000)
  await sleep(subscription.renewEveryMs)
  t.equal(subscription.stats().state, 'standby')

  // The other instance's lease ends while Redis hangs for more than a renewal period (less than a
  // command's timeout): the acquisitions sent meanwhile are answered together once it resumes.
  await client.pexpire(keys.lease, 200)
  redis.hang()
  await sleep(subscription.renewEveryMs * 2 + 200)
  redis.resume()
  await waitFor('the lease taken', async () => subscription.stats().state === 'connected', 10_000)
  const held = await client.get(keys.lease)
  t.match(held, `${subscription.instance}#`, 'this instance holds the lease')
  const states = sampleStates(app)
  await sleep(subscription.renewEveryMs * 2 + 500)
  const seen = states()
  t.equal(await client.get(keys.lease), held, 'the same lease, renewed')
  t.notOk(seen.has('standby'), `never standing by again (states seen: ${[...seen].join(', ')})`)
})

t.test('a lease in the instance\'s own name that it never learned of (an acquisition that timed out, which Redis ran later): taken again at its next tick with a new token, not once it lapses', async (t) => {
  // A lease of 8 s, ticks every 2 s: waiting it out would take four ticks.
  const leaseTtlMs = 8000
  const { client, keys, subscription } = await onOwnRedis(t, leaseTtlMs, 1000)
  await sleep(500)
  t.equal(subscription.stats().state, 'standby')

  // What such an acquisition leaves, set here rather than by a hang whose timing decides whether the
  // answer is lost: the lease in this instance's name, with the next fencing token.
  const lost = Number(await client.get(keys.fence) ?? 0) + 1
  await client.multi().set(keys.fence, String(lost)).set(keys.lease, `${subscription.instance}#${lost}`, 'PX', leaseTtlMs).exec()
  const since = Date.now()
  await waitFor('the lease taken again', async () => subscription.stats().state === 'connected', leaseTtlMs)
  const tookMs = Date.now() - since
  t.ok(tookMs < subscription.renewEveryMs + 2000, `subscribed within ${tookMs} ms: at its next tick, not once the lease lapsed`)
  const held = await client.get(keys.lease)
  t.match(held, `${subscription.instance}#`, 'in its own name')
  t.ok(Number(held!.split('#')[1]) > lost, `with a new fencing token (${held!.split('#')[1]}), above the lost one (${lost})`)
})

t.test('a holder whose renewal times out while Redis hangs stops, and once Redis answers subscribes again at its next tick, not once its own lease lapses', async (t) => {
  // A lease of 12 s, ticks every 3 s, commands bounded at 1 s: the hang outlasts a tick and a command's timeout.
  const { redis, client, keys, subscription } = await onOwnRedis(t, 12_000, 1000, { free: true })
  await waitFor('the subscription', async () => subscription.stats().state === 'connected', 10_000)
  const before = await client.get(keys.lease)
  redis.hang()
  await sleep(subscription.renewEveryMs + 2500)
  t.not(subscription.stats().state, 'connected', 'stopped when its renewal failed')
  redis.resume()
  const since = Date.now()
  // The renewal sent during the hang runs now: the lease lives on, 12 s more, in this instance's name.
  await waitFor('subscribed again', async () => subscription.stats().state === 'connected', 15_000)
  const tookMs = Date.now() - since
  t.ok(tookMs < subscription.renewEveryMs + 2000, `subscribed again ${tookMs} ms after Redis answered: at its next tick`)
  const held = await client.get(keys.lease)
  t.match(held, `${subscription.instance}#`, 'in its own name')
  t.ok(Number(held!.split('#')[1]) > Number(before!.split('#')[1]), 'with a new fencing token')
})

import t from 'tap'
import { buildTestApp, testKeyPrefix } from '../../../helpers/app.js'
import { SubscriptionLease } from '../../../../plugins/app/platform-events/lease.js'
import { LeaseLost, SubscriptionReplay } from '../../../../plugins/app/platform-events/replay.js'
import { ReplayPositions } from '../../../../plugins/app/platform-events/replay-positions.js'
import { ORDER_PROVISION_CHANNEL } from '../../../../plugins/app/platform-events/subscription.js'
import { subscriptionKeys } from '../../../../plugins/app/redis-keys.js'
import type { PlatformEventMessage } from '../../../../integrations/crm/bayeux-protocol.js'

const event = (replayId: number): PlatformEventMessage => ({ channel: ORDER_PROVISION_CHANNEL, data: { payload: { OrderId__c: `order-${replayId}` }, event: { replayId } } })

t.test('a former holder, paused past its lease, writes no replay position once another instance holds it: neither in Redis nor in PostgreSQL', async (t) => {
  const prefix = testKeyPrefix()
  // The app's PostgreSQL schema (migrated) and Redis; its own subscription is disabled.
  const app = await buildTestApp(t, { REDIS_KEY_PREFIX: prefix })
  const keys = subscriptionKeys(prefix, ORDER_PROVISION_CHANNEL)
  const positions = new ReplayPositions(app.pg.pool)
  const holder = (instance: string) => {
    const lease = new SubscriptionLease({ redis: app.redis, keys, instance, ttlMs: 60_000 })
    const replay = new SubscriptionReplay({ channel: ORDER_PROVISION_CHANNEL, replay: undefined, redis: app.redis, keys, positions, handOff: async () => {}, handOffConcurrency: 5, log: app.log })
    return { lease, replay }
  }
  const stored = async () => ({ redis: await app.redis.get(keys.replay), postgres: await positions.read(ORDER_PROVISION_CHANNEL) })

  const former = holder('former')
  const formerToken = await former.lease.acquire()
  t.ok(formerToken, 'the first instance holds the lease, with a token')
  former.replay.holding(formerToken!)
  await former.replay.handOff([event(10)])
  t.same(await stored(), { redis: '10', postgres: 10 }, 'the holder writes the position')

  // The former holder pauses; its lease expires and the next instance takes it.
  await app.redis.del(keys.lease)
  const next = holder('next')
  const nextToken = await next.lease.acquire()
  t.ok(nextToken !== null && BigInt(nextToken) > BigInt(formerToken!), `the next holder's token is higher (${formerToken} then ${String(nextToken)})`)
  next.replay.holding(nextToken!)
  await next.replay.handOff([event(20)])

  // The former holder wakes with a batch it handed off: its write is refused, the batch fails.
  await t.rejects(former.replay.handOff([event(30)]), LeaseLost, 'the former holder\'s write is refused in Redis')
  // A write to the mirror that passed Redis's check before the pause, landing after the next holder's.
  await positions.advance(ORDER_PROVISION_CHANNEL, 40, formerToken!)
  await positions.forget(ORDER_PROVISION_CHANNEL, formerToken!)
  t.same(await stored(), { redis: '20', postgres: 20 }, 'the position is the next holder\'s, in Redis and in PostgreSQL')
  await t.rejects(former.replay.forget(), LeaseLost, 'nor can the former holder forget the position')
  t.same(await stored(), { redis: '20', postgres: 20 })

  // The former holder's renewal finds the lease gone; its release leaves the next holder's alone.
  t.equal(await former.lease.renew(), 'lost')
  await former.lease.release()
  t.equal(await next.lease.renew(), 'renewed', 'the next holder still holds the lease')
  await next.replay.handOff([event(50)])
  t.same(await stored(), { redis: '50', postgres: 50 }, 'and goes on writing')
  await next.lease.release()
  t.equal(await app.redis.get(keys.lease), null, 'a release lets the lease go at once')
  await app.redis.del(keys.fence, keys.replay)
})

import t from 'tap'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import pino from 'pino'
import { PubSub } from '../../../plugins/app/pubsub.js'
import { orderStatusChannel, revocationChannel } from '../../../plugins/app/redis-keys.js'
import { buildTestApp, testKeyPrefix } from '../../helpers/app.js'
import { SHARED_REDIS } from '../../helpers/made.js'
import { waitFor } from '../../helpers/processes.js'

const redis = new Redis(SHARED_REDIS)
t.teardown(() => redis.quit())

/** The subscriber connections named `name` on the shared Redis, each with its count of channels. */
async function subscribersNamed (name: string): Promise<Array<{ id: string, channels: number }>> {
  const list = await redis.call('CLIENT', 'LIST', 'TYPE', 'pubsub') as string
  return list.split('\n').filter((line) => line.includes(` name=${name} `)).map((line) => ({
    id: /\bid=(\d+)/.exec(line)?.[1] ?? '',
    channels: Number(/\bsub=(\d+)/.exec(line)?.[1])
  }))
}

const subscribed = async (channel: string) => ((await redis.pubsub('NUMSUB', channel)) as [string, number])[1]

t.test('one connection for every channel and handler; each channel is subscribed again after a reconnection', async (t) => {
  const name = `pubsub-test-${randomUUID()}`
  const connection = new Redis(SHARED_REDIS, { connectionName: name, enableOfflineQueue: true, autoResubscribe: false })
  connection.on('error', () => {})
  t.teardown(() => connection.disconnect())
  const pubsub = new PubSub(connection, pino({ level: 'silent' }))
  const [first, second] = [`${name}:first`, `${name}:second`]
  const heard: string[] = []
  await pubsub.subscribe(first, (message) => heard.push(`a ${message}`))
  await pubsub.subscribe(first, (message) => heard.push(`b ${message}`))
  await pubsub.subscribe(second, (message) => heard.push(`c ${message}`))
  let lost = 0
  pubsub.onLost(() => { lost++ })

  const [subscriber, ...more] = await subscribersNamed(name)
  t.same(more, [], 'one connection')
  t.equal(subscriber?.channels, 2, 'each channel subscribed once, whatever its handlers')
  await redis.publish(first, '1')
  await redis.publish(second, '2')
  await waitFor('both messages', async () => heard.length === 3, 2000)
  t.same(heard.sort(), ['a 1', 'b 1', 'c 2'], 'each handler hears its channel only')

  await redis.call('CLIENT', 'KILL', 'ID', subscriber!.id)
  await waitFor('the connection lost', async () => lost === 1, 2000)
  await waitFor('both channels subscribed again', async () => await subscribed(first) === 1 && await subscribed(second) === 1, 5000)
  await redis.publish(second, '3')
  await waitFor('a message after the reconnection', async () => heard.includes('c 3'), 2000)
  t.pass('messages arrive again after the reconnection')
  await pubsub.ping()
  t.pass('ping answers on the subscribing connection')
})

t.test('an instance subscribes to revocations and order status changes on one connection, closed with the app', async (t) => {
  const name = `pubsub-app-${randomUUID()}`
  const prefix = testKeyPrefix()
  const app = await buildTestApp(t, { SERVICE_NAME: name, REDIS_KEY_PREFIX: prefix })
  const subscribers = await subscribersNamed(name)
  t.same(subscribers.map(({ channels }) => channels), [2], 'one subscriber connection holds both channels')
  t.equal(await subscribed(revocationChannel(prefix, 0)), 1)
  t.equal(await subscribed(orderStatusChannel(prefix, 0)), 1)
  await app.close()
  t.same(await subscribersNamed(name), [], 'closed with the app')
})

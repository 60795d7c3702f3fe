import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox } from '../../helpers/app.js'
import { PrivateRedis } from '../../helpers/private-redis.js'
import { waitFor } from '../../helpers/processes.js'
import { SseClient } from '../../helpers/sse.js'
import { bearer } from '../../helpers/tokens.js'

const CLIENT_ID = 1

/** A new order of the client, moved to Provisioning and announced, as provisioning does: its id. */
async function announceAnOrder (app: FastifyInstance): Promise<string> {
  const order = await app.orders.store.create({ billingClientId: CLIENT_ID, productId: '1', billingCycle: 'monthly', billingOrderId: null, crmOrderId: null })
  const changed = await app.orders.store.changeStatus(order.id, 'Provisioning')
  await app.orders.statusChanges.publish(changed!)
  return order.id
}

const ordersOn = (stream: SseClient) => stream.events.filter((event) => event.event === 'order.status').map((event) => (JSON.parse(event.data ?? '{}') as { orderId: string }).orderId)

t.test('two deployments on one Redis, in databases 0 and 1 with the same key prefix: neither\'s stream shows the other\'s orders of the same client id', async (t) => {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const sandbox = await startTestSandbox(t)
  const prefix = `shared-${randomUUID()}:`
  const [first, second] = await Promise.all([0, 1].map((database) => buildTestApp(t, { REDIS_URL: `${redis.url}/${database}`, REDIS_KEY_PREFIX: prefix }, sandbox)))
  const streams = await Promise.all([first!, second!].map(async (app) => {
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    const stream = await SseClient.open(`${url}/api/events`, bearer(app.jwt.sign({ sub: String(CLIENT_ID), jti: randomUUID() })))
    t.teardown(() => stream.close())
    return stream
  }))
  const [firstStream, secondStream] = streams as [SseClient, SseClient]
  t.same(streams.map((stream) => stream.status), [200, 200], 'both streams open')

  // Redis hands a subscriber its messages in the order they were published: a message of the other
  // deployment, had it arrived, would come before the last one of the stream's own.
  const firstOrders = [await announceAnOrder(first!)]
  const secondOrders = [await announceAnOrder(second!)]
  firstOrders.push(await announceAnOrder(first!))
  await waitFor('each deployment\'s orders on its own stream', async () => ordersOn(firstStream).length >= 2 && ordersOn(secondStream).length >= 1)
  t.same(ordersOn(firstStream), firstOrders, 'database 0\'s stream: its own orders only')
  t.same(ordersOn(secondStream), secondOrders, 'database 1\'s stream: its own order only')
})

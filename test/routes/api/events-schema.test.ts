import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { projectRoot } from '../../../lib/project-root.js'
import type { Order, OrderStatus } from '../../../plugins/app/orders/store.js'
import { orderStatusBacklogKey, orderStatusChannel } from '../../../plugins/app/redis-keys.js'
import { databaseOf } from '../../../plugins/external/redis-connection.js'
import { ORDER_STATUSES } from '../../../schemas/orders.js'
import { SSE_FRAMES, sseFrameProblems, type SseFrameName } from '../../../schemas/sse-events.js'
import { buildTestApp } from '../../helpers/app.js'
import { waitFor } from '../../helpers/processes.js'
import { SseClient } from '../../helpers/sse.js'
import { bearer } from '../../helpers/tokens.js'

t.test('the API document publishes each event of the stream as a schema', async (t) => {
  const app = await buildTestApp(t)
  const document = (await app.inject('/docs/json')).json()
  const { schemas } = document.components
  const stream = document.paths['/api/events'].get.responses['200'].content['text/event-stream']
  t.same(stream.schema, { $ref: '#/components/schemas/SseEvent' }, 'the stream\'s content is its events')
  t.same(schemas.SseEvent.oneOf.map((event: { properties: { event: { enum: string[] }, data: unknown } }) => [event.properties.event.enum, event.properties.data]), [
    [['order.status'], { $ref: '#/components/schemas/OrderStatusEvent' }],
    [['session.ended'], { $ref: '#/components/schemas/SessionEndedEvent' }],
    [['shutdown'], { $ref: '#/components/schemas/ShutdownEvent' }]
  ], 'one per event name, its data a schema of its own')
  t.same(Object.keys(schemas.OrderStatusEvent.properties), ['orderId', 'crmOrderId', 'status', 'failureReason', 'at'])
  t.same(schemas.OrderStatusEvent.properties.status.enum, ORDER_STATUSES)
  t.equal(schemas.OrderStatusEvent.additionalProperties, false)
  const { event, data } = stream.example as { event: SseFrameName, data: unknown }
  t.equal(event, 'order.status', 'the document\'s example is an event')
  t.same(sseFrameProblems(event, data), [], `its ${event} holds to its schema`)
})

t.test('an order.status event that breaks its schema is refused before Redis; one read back that breaks it is never sent', async (t) => {
  const app = await buildTestApp(t)
  const clientId = 3
  const key = orderStatusBacklogKey(app.config.REDIS_KEY_PREFIX, clientId)
  const order = await app.orders.store.create({ billingClientId: clientId, productId: '1', billingCycle: 'monthly', billingOrderId: null, crmOrderId: null })
  const url = `${await app.listen({ port: 0, host: '127.0.0.1' })}/api/events`
  const stream = await SseClient.open(url, bearer(app.jwt.sign({ sub: String(clientId), jti: randomUUID() })))
  t.teardown(() => stream.close())
  t.equal(stream.status, 200)

  const broken: Array<[string, Order]> = [
    ['a status no order has', { ...order, status: 'Shipped' as OrderStatus }],
    ['a time that is no date', { ...order, updatedAt: 'yesterday' }],
    ['an order id that is no UUID', { ...order, id: 'order-1' }]
  ]
  for (const [what, event] of broken) {
    await t.rejects(app.orders.statusChanges.publish(event), { code: 'SSE_EVENT_REFUSED', message: /^The order\.status event breaks its schema and is not published: \/(status|at|orderId) must/ }, `refused: ${what}`)
  }
  t.equal(await app.redis.exists(key), 0, 'nothing reached the backlog')

  await app.orders.statusChanges.publish({ ...order, status: 'Provisioning' })
  await waitFor('the valid change on the stream', async () => stream.events.length === 1)
  t.same(stream.events.map((event) => JSON.parse(event.data ?? '{}').status), ['Provisioning'], 'the stream got only the valid change')
  t.equal(await app.redis.xlen(key), 1)

  // Written by something else than the service: read back through the schema, and left out.
  await app.redis.xadd(key, '*', 'event', JSON.stringify({ orderId: order.id, status: 'Shipped' }))
  await app.redis.publish(orderStatusChannel(app.config.REDIS_KEY_PREFIX, databaseOf(app.redis)), JSON.stringify({ clientId, event: { id: `${Date.now()}-0`, orderId: order.id, status: 'Shipped' } }))
  await app.orders.statusChanges.publish({ ...order, status: 'Active' })
  await waitFor('the next valid change on the stream', async () => stream.events.length === 2)
  t.same(stream.events.map((event) => JSON.parse(event.data ?? '{}').status), ['Provisioning', 'Active'], 'an announcement that breaks the schema is not sent')
  const resumed = await app.orders.statusChanges.backlog(clientId, '0-0')
  t.same(resumed.map((event) => event.status), ['Provisioning', 'Active'], 'nor a backlog entry that breaks it')
})

t.test('docs/frontend.md\'s table of the stream\'s events agrees with their schemas', async (t) => {
  const text = readFileSync(join(projectRoot, 'docs/frontend.md'), 'utf8')
  const table = text.slice(text.indexOf('| event | data |'))
  const rows = [...table.matchAll(/^\| `([a-z.]+)` \| (.*) \|$/gm)].map(([, name, data]) => ({ name: name!, data: data! }))
  t.same(rows.map(({ name }) => name), Object.keys(SSE_FRAMES), 'a row per event, in the schemas\' order')
  for (const { name, data } of rows) {
    const schema = SSE_FRAMES[name as keyof typeof SSE_FRAMES]
    const fields = /^`\{([^}]*)\}`/.exec(data)?.[1]?.split(',').map((field) => field.trim())
    t.same(fields, Object.keys(schema.properties), `${name}: the fields of its data`)
    const values = (Object.values(schema.properties) as Array<{ enum?: string[] }>).flatMap((property) => property.enum ?? [])
    for (const value of values) t.ok(data.includes(`\`${value}\``), `${name}: names ${value}`)
  }
})

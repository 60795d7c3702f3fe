import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, scopeWith } from '../../helpers/app.js'
import { waitFor } from '../../helpers/processes.js'
import { SseClient } from '../../helpers/sse.js'
import { bearer } from '../../helpers/tokens.js'
import type { Order, OrderStatus } from '../../../plugins/app/orders/store.js'

const USERS = 200
const STREAMS_PER_USER = 5
const OPENED_AT_ONCE = 100
// Ids whose digits overlap (1, 10, 100, 101; 2, 20, 200): a stream picked by a prefix or a
// string comparison of the id instead of the id would show.
const CHANGED_ALONE = [1, 10, 100, 101, 2, 20, 200, 57]

interface UserStreams { clientId: number, order: Order, streams: SseClient[] }

function received (stream: SseClient): Array<{ orderId: string, status: OrderStatus }> {
  return stream.events.filter((event) => event.event === 'order.status').map((event) => JSON.parse(event.data ?? '{}'))
}

/** Moves the order to `status` and announces it, as provisioning does. */
async function changeStatus (app: FastifyInstance, order: Order, status: OrderStatus): Promise<Order> {
  const changed = await app.orders.store.changeStatus(order.id, status)
  if (changed === null) throw new Error(`order ${order.id} already ${status}`)
  await app.orders.statusChanges.publish(changed)
  return changed
}

t.test(`${USERS} users × ${STREAMS_PER_USER} streams: a status change reaches every stream of its user, and no other`, async (t) => {
  const app = await buildTestApp(t)
  const url = `${await app.listen({ port: 0, host: '127.0.0.1' })}/api/events`
  const users: UserStreams[] = []
  for (let clientId = 1; clientId <= USERS; clientId++) {
    const order = await app.orders.store.create({ billingClientId: clientId, productId: '1', billingCycle: 'monthly', billingOrderId: null, crmOrderId: null })
    users.push({ clientId, order, streams: [] })
  }
  const streams: SseClient[] = []
  t.teardown(() => { for (const stream of streams) stream.close() })
  // Tokens as POST /auth/login signs them: the sandbox billing has four clients, not two hundred.
  const pending = users.flatMap((user) => Array.from({ length: STREAMS_PER_USER }, () => user))
  const tokens = new Map(users.map(({ clientId }) => [clientId, app.jwt.sign({ sub: String(clientId), jti: randomUUID() })]))
  while (pending.length > 0) {
    await Promise.all(pending.splice(0, OPENED_AT_ONCE).map(async (user) => {
      const stream = await SseClient.open(url, bearer(tokens.get(user.clientId)!))
      streams.push(stream)
      user.streams.push(stream)
    }))
  }
  t.ok(streams.every((stream) => stream.status === 200), 'every stream opened')
  t.equal(scopeWith(app, 'sseStreams').sseStreams.counts().open, USERS * STREAMS_PER_USER, `${USERS * STREAMS_PER_USER} streams open on the instance`)

  const changedSoFar = new Set<number>()
  for (const clientId of CHANGED_ALONE) {
    const user = users[clientId - 1]!
    user.order = await changeStatus(app, user.order, 'Provisioning')
    changedSoFar.add(clientId)
    await waitFor(`client ${clientId}'s change on its ${STREAMS_PER_USER} streams`, async () => user.streams.every((stream) => received(stream).length >= 1))
    const strays = users.filter(({ clientId }) => !changedSoFar.has(clientId)).flatMap(({ streams }) => streams).filter((stream) => stream.events.length > 0)
    t.equal(strays.length, 0, `client ${clientId}'s change: on its ${STREAMS_PER_USER} streams, on no stream of a client whose orders did not change`)
  }

  // Every user's order changes last: once a stream has its own, every change published before is
  // on it or never will be (one channel, in order, and one connection for each stream).
  // In pool-sized batches: two hundred at once would wait on the pool past its connect timeout on a loaded machine.
  for (let first = 0; first < users.length; first += 10) {
    await Promise.all(users.slice(first, first + 10).map(async (user) => { user.order = await changeStatus(app, user.order, 'Active') }))
  }
  await waitFor('every stream\'s Active', async () => streams.every((stream) => received(stream).some(({ status }) => status === 'Active')), 20_000)

  const wrong: string[] = []
  for (const { clientId, order, streams: own } of users) {
    const expected = [...CHANGED_ALONE.includes(clientId) ? ['Provisioning'] : [], 'Active'].map((status) => ({ orderId: order.id, status }))
    for (const stream of own) {
      const got = received(stream).map(({ orderId, status }) => ({ orderId, status }))
      if (JSON.stringify(got) !== JSON.stringify(expected)) wrong.push(`client ${clientId}: ${JSON.stringify(got)}`)
    }
  }
  t.same(wrong, [], 'each stream holds its own user\'s changes, each once, in order, and nothing else')
  t.ok(streams.every((stream) => !stream.ended), 'every stream still open')
})

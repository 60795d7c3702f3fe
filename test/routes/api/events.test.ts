import t from 'tap'
import { once } from 'node:events'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildTestApp, scopeWith, startTestSandbox } from '../../helpers/app.js'
import { waitFor } from '../../helpers/processes.js'
import { buildTestAppOnPrivateRedis } from '../../helpers/private-redis.js'
import { SseClient } from '../../helpers/sse.js'
import { LIVENESS_INTERVAL_MS } from '../../../plugins/app/orders/status-changes.js'
import { bearer, login } from '../../helpers/tokens.js'

function statuses (client: SseClient): string[] {
  return client.events.filter((event) => event.event === 'order.status').map((event) => JSON.parse(event.data ?? '{}').status)
}

t.test('a client sees its order go Pending Review → Provisioning → Active, resumes, and sees no one else\'s', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const jane = await login(app)
  const john = await login(app, 'john@example.com', 'battery-staple')

  const janes = await SseClient.open(`${url}/api/events`, bearer(jane))
  const johns = await SseClient.open(`${url}/api/events`, bearer(john))
  t.teardown(() => { janes.close(); johns.close() })
  t.equal(janes.status, 200)
  t.equal((await SseClient.open(`${url}/api/events`, {})).status, 401, 'the stream needs a token')

  const order = (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(jane), payload: { productId: 1, billingCycle: 'monthly' } })).json()
  await app.orders.jobs.enqueue(order.crmOrderId)
  await waitFor('Active on the stream', async () => statuses(janes).includes('Active'))
  t.same(statuses(janes), ['Pending Review', 'Provisioning', 'Active'])
  const last = janes.events.at(-1)!
  t.match(last, { id: /^\d+-\d+$/, event: 'order.status' })
  t.match(JSON.parse(last.data!), { orderId: order.id, crmOrderId: order.crmOrderId, status: 'Active' })
  t.same(johns.events, [], 'another user sees none of it')
  const backlogTtl = await app.redis.ttl(`${app.config.REDIS_KEY_PREFIX}orders:events:1`)
  t.ok(backlogTtl > 86_400 - 60 && backlogTtl <= 86_400, `the backlog is removed a day after its last change (TTL ${backlogTtl} s)`)

  janes.close()
  const second = (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(jane), payload: { productId: 2, billingCycle: 'annually' } })).json()
  const resumed = await SseClient.open(`${url}/api/events`, { ...bearer(jane), 'last-event-id': last.id! })
  t.teardown(() => resumed.close())
  await waitFor('the missed event', async () => resumed.events.length >= 1)
  t.same(statuses(resumed), ['Pending Review'], 'only what was missed')
  t.equal(JSON.parse(resumed.events[0]!.data!).orderId, second.id)
  t.same(johns.events, [])
})

t.test('a Last-Event-ID from the future is ignored: live events still arrive; HEAD is not served', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const jane = await login(app)
  const head = await app.inject({ method: 'HEAD', url: '/api/events', headers: bearer(jane) })
  t.equal(head.statusCode, 405, 'HEAD answers at once instead of never sending its headers')
  t.equal(head.headers.allow, 'GET', 'GET alone is served')

  const streams = await Promise.all(['99999999999999-0', '99999999999999999999-99999999999999999999', `${Date.now() + 3_600_000}-0`]
    .map((id) => SseClient.open(`${url}/api/events`, { ...bearer(jane), 'last-event-id': id })))
  t.teardown(() => { for (const stream of streams) stream.close() })
  const order = (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(jane), payload: { productId: 1, billingCycle: 'monthly' } })).json()
  await waitFor('the new order on every stream', async () => streams.every((stream) => statuses(stream).includes('Pending Review')))
  for (const stream of streams) t.equal(JSON.parse(stream.events.at(-1)!.data!).orderId, order.id)
})

t.test('a heartbeat every 15 s, and the streams drop when Redis fails', async (t) => {
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { AUTH_BLACKLIST_FAIL_CLOSED: 'false' })
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const stream = await SseClient.open(`${url}/api/events`, bearer(await login(app)))
  t.teardown(() => stream.close())
  await waitFor('a heartbeat', async () => stream.comments >= 1, 17_000)
  t.pass('a comment line arrived')
  await redis.kill()
  await waitFor('the stream to end', async () => stream.ended, 5000)
  t.pass('the stream dropped; the client reconnects')
})

t.test('Redis hung: open streams drop once a liveness PING goes unanswered; once Redis answers, a new stream gets the changes', async (t) => {
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { REDIS_COMMAND_TIMEOUT_MS: '500', AUTH_BLACKLIST_FAIL_CLOSED: 'false' })
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const token = await login(app)
  const stream = await SseClient.open(`${url}/api/events`, bearer(token))
  t.teardown(() => stream.close())

  redis.hang()
  const placed = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })
  t.equal(placed.statusCode, 201, 'the order is placed and stored')
  // Specification §6: streams drop when the cache fails, at the next liveness check.
  await waitFor('the stream to drop', async () => stream.ended, LIVENESS_INTERVAL_MS + 20_000)
  t.same(statuses(stream), [], 'its Pending Review was not announced')

  redis.resume()
  const again = await SseClient.open(`${url}/api/events`, bearer(token))
  t.teardown(() => again.close())
  await app.orders.jobs.enqueue(placed.json().crmOrderId)
  await waitFor('Active on the new stream', async () => statuses(again).includes('Active'), 15_000)
  t.same(statuses(again), ['Provisioning', 'Active'], 'the changes after Redis answers again')
  await new Promise((resolve) => setTimeout(resolve, LIVENESS_INTERVAL_MS + 1000))
  t.equal(again.ended, false, 'a stream stays open while Redis answers')
})

t.test('a client gone while its token was being checked leaves no stream behind to count against its limit', async (t) => {
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { REDIS_COMMAND_TIMEOUT_MS: '5000' })
  const url = new URL(await app.listen({ port: 0, host: '127.0.0.1' }))
  const token = await login(app)
  // The token check waits on a hung Redis while the client goes away.
  redis.hang()
  const socket = connect(Number(url.port), url.hostname)
  await once(socket, 'connect')
  socket.write(`GET /api/events HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${token}\r\n\r\n`)
  await sleep(300)
  socket.destroy()
  await sleep(100)
  redis.resume()

  // A stream opened after it on the same Redis connection: by then the gone client's request has been handled.
  const stream = await SseClient.open(`${url.origin}/api/events`, bearer(token))
  t.teardown(() => stream.close())
  t.equal(stream.status, 200)
  await sleep(500)
  t.equal(scopeWith(app, 'sseStreams').sseStreams.counts().open, 1, 'only the stream whose client is there')
})

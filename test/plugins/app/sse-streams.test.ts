import t from 'tap'
import { randomUUID } from 'node:crypto'
import { request } from 'undici'
import { buildTestApp, scopeWith, ensureTestDatabase, startTestSandbox, testEnv, testKeyPrefix, testSchemaUrl } from '../../helpers/app.js'
import { waitFor } from '../../helpers/processes.js'
import { startService } from '../../helpers/service-process.js'
import { SseClient } from '../../helpers/sse.js'
import { bearer, login } from '../../helpers/tokens.js'
import { SseStreams } from '../../../plugins/app/sse-streams/index.js'

const ended = (client: SseClient) => client.events.filter((event) => event.event === 'session.ended').map((event) => JSON.parse(event.data ?? '{}').reason)

t.test('logout on one instance ends the token\'s stream on another; an expiring token\'s stream ends at its expiry', async (t) => {
  const sandbox = await startTestSandbox(t)
  // Two instances of one deployment: one database, one Redis key prefix.
  const shared = { DATABASE_URL: await testSchemaUrl(t), REDIS_KEY_PREFIX: testKeyPrefix() }
  const first = await buildTestApp(t, shared, sandbox)
  const second = await buildTestApp(t, shared, sandbox)
  const secondUrl = await second.listen({ port: 0, host: '127.0.0.1' })

  const token = await login(first)
  const otherToken = await login(first)
  const stream = await SseClient.open(`${secondUrl}/api/events`, bearer(token))
  const other = await SseClient.open(`${secondUrl}/api/events`, bearer(otherToken))
  t.teardown(() => { stream.close(); other.close() })
  t.equal(stream.status, 200)
  t.equal(scopeWith(second, 'sseStreams').sseStreams.counts().open, 2)

  t.equal((await first.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 204)
  await waitFor('the stream on the other instance to end', async () => stream.ended, 20_000)
  t.same(ended(stream), ['logged_out'], 'told why before it ended')
  t.notOk(other.ended, 'a stream of another token of the same user goes on')
  t.equal(scopeWith(second, 'sseStreams').sseStreams.counts().open, 1)

  // A token that expires in 2 s: its stream ends then, without any request.
  const [{ sub }] = [first.jwt.decode<{ sub: string }>(token)!]
  const shortLived = await first.jwt.sign({ sub, jti: randomUUID() }, { expiresIn: 2 })
  const expiring = await SseClient.open(`${secondUrl}/api/events`, bearer(shortLived))
  t.teardown(() => expiring.close())
  t.equal(expiring.status, 200)
  const { exp } = first.jwt.decode<{ exp: number }>(shortLived)!
  await waitFor('the expiring stream to end', async () => expiring.ended, 20_000)
  t.ok(Date.now() >= exp * 1000, 'not before its token\'s expiry')
  t.same(ended(expiring), ['expired'])
})

t.test('one user may hold SSE_MAX_STREAMS_PER_USER streams: one more is refused at once with 429; another user still gets one', async (t) => {
  const app = await buildTestApp(t, { SSE_MAX_STREAMS_PER_USER: '5', SSE_MAX_STREAMS: '7' })
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const jane = await login(app)
  const john = await login(app, 'john@example.com', 'battery-staple')
  const streams = await Promise.all(Array.from({ length: 5 }, () => SseClient.open(`${url}/api/events`, bearer(jane))))
  t.teardown(() => { for (const stream of streams) stream.close() })
  t.same(streams.map((stream) => stream.status), [200, 200, 200, 200, 200])

  const sixth = await request(`${url}/api/events`, { headers: bearer(jane) })
  t.equal(sixth.statusCode, 429, 'refused, while the five stay open: nothing waited for room')
  t.match(await sixth.body.json(), { code: 'TOO_MANY_STREAMS', message: /\(5\)/ })
  t.same(streams.map((stream) => stream.ended), [false, false, false, false, false], 'no older stream was closed to make room')

  const johns = await SseClient.open(`${url}/api/events`, bearer(john))
  t.teardown(() => johns.close())
  t.equal(johns.status, 200, 'another user still gets one')
  const johnsSecond = await SseClient.open(`${url}/api/events`, bearer(john))
  t.teardown(() => johnsSecond.close())
  const full = await request(`${url}/api/events`, { headers: bearer(john) })
  t.equal(full.statusCode, 503, 'the instance ceiling: 503')
  t.equal(full.headers['retry-after'], '5')
  t.match(await full.body.json(), { code: 'STREAMS_UNAVAILABLE' })

  streams[0]!.close()
  await waitFor('a place to free up', async () => scopeWith(app, 'sseStreams').sseStreams.counts().open === 6)
  const again = await SseClient.open(`${url}/api/events`, bearer(jane))
  t.teardown(() => again.close())
  t.equal(again.status, 200, 'a closed stream frees its place')

  const metrics = (await app.inject('/metrics')).body
  t.match(metrics, /^portal_bff_sse_streams_open 7$/m)
  t.match(metrics, /^portal_bff_sse_streams_refused_total\{reason="user_limit"\} 1$/m)
  t.match(metrics, /^portal_bff_sse_streams_refused_total\{reason="instance_limit"\} 1$/m)
  t.match((await app.inject('/status/summary')).json().streams, { open: 7, refused: { user_limit: 1, instance_limit: 1 } })
})

t.test('SIGTERM with several streams open: every stream ends and the process exits 0 within 5 s', async (t) => {
  await ensureTestDatabase()
  const service = await startService(testEnv({ CRM_EVENTS_ENABLED: 'false' }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  const signIn = await request(`${service.url}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  const { accessToken } = await signIn.body.json() as { accessToken: string }
  const streams = await Promise.all(Array.from({ length: 3 }, () => SseClient.open(`${service.url}/api/events`, bearer(accessToken))))
  t.same(streams.map((stream) => stream.status), [200, 200, 200])

  service.child.kill('SIGTERM')
  // Past SHUTDOWN_TIMEOUT_MS the process exits 1: the open streams did not hold the shutdown to it.
  t.equal(await service.exit, 0, 'exit 0')
  await waitFor('every stream to end', async () => streams.every((stream) => stream.ended), 10_000)
  t.ok(streams.every((stream) => stream.events.some((event) => event.event === 'shutdown')), 'each was told the instance is shutting down')
})

t.test('the streams take turns for their heartbeat: each gets one every period, a fifteenth of them at a time', async (t) => {
  const PERIOD_MS = 600
  const registry = new SseStreams({ perUser: 100, total: 100, heartbeatMs: PERIOD_MS })
  t.teardown(() => registry.close())
  const beats = new Map<string, number>()
  let batch: string[] = []
  const batches: string[][] = []
  const flush = () => {
    if (batch.length > 0) batches.push(batch)
    batch = []
  }
  const open = (jti: string) => registry.open({
    owner: { clientId: 1, jti, exp: Math.floor(Date.now() / 1000) + 60 },
    end: () => {},
    heartbeat: () => {
      beats.set(jti, (beats.get(jti) ?? 0) + 1)
      // One turn's heartbeats run together, in one timer callback: the batch ends with it. (Not at the
      // event loop's next phase: on a busy machine two overdue turns run in the same timers phase.)
      if (batch.length === 0) queueMicrotask(flush)
      batch.push(jti)
    }
  })
  for (let i = 0; i < 30; i++) t.equal(open(`token-${i}`), undefined)
  await waitFor('two heartbeats on every stream', async () => beats.size === 30 && [...beats.values()].every((count) => count >= 2), PERIOD_MS * 10)
  const counts = [...beats.values()]
  t.ok(Math.max(...counts) - Math.min(...counts) <= 1, `in turns, none skipped: ${counts.join(',')}`)
  t.ok(batches.every((one) => one.length <= 2), `never more than a fifteenth at once: ${batches.map((one) => one.length).join(',')}`)

  const released = registry.release({ owner: { clientId: 1, jti: 'unknown', exp: 0 }, end: () => {}, heartbeat: () => {} })
  t.equal(released, false, 'a stream it does not hold is not released')
})

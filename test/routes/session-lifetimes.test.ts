import t from 'tap'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildTestApp, startTestSandbox, testSchemaUrl } from '../helpers/app.js'
import { buildTestAppOnPrivateRedis, PrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'
import { CSRF, JANE, JOHN, ORDER, startSession, status } from '../helpers/sessions.js'
import { SseClient } from '../helpers/sse.js'
import { bearer, login } from '../helpers/tokens.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'

t.test('lifetimes: reads keep a session alive past its idle timeout, GET /auth/session does not, and no session outlives its age', async (t) => {
  const app = await buildTestApp(t, { SESSION_IDLE_TIMEOUT_S: '4', SESSION_MAX_AGE_S: '12' })
  const [active, polled] = [await startSession(app), await startSession(app)]
  const started = Date.now()
  const seen = { activeUntil: 0, polledUntil: 0 }
  await Promise.all([
    (async () => {
      while (Date.now() - started < 16_000) {
        if (await status(app, active.cookie) !== 200) break
        seen.activeUntil = Date.now() - started
        await sleep(2000)
      }
    })(),
    (async () => {
      while (Date.now() - started < 16_000) {
        if (await status(app, polled.cookie, '/auth/session') !== 200) break
        seen.polledUntil = Date.now() - started
        await sleep(1000)
      }
    })()
  ])
  t.ok(seen.activeUntil >= 8000, `reads every 2 s kept the session alive past 4 s (to ${seen.activeUntil} ms)`)
  t.ok(seen.activeUntil < 12_000, `and it ended at its 12 s age (last read ${seen.activeUntil} ms)`)
  t.ok(seen.polledUntil < 4000, `polling GET /auth/session alone let it idle out (last 200 at ${seen.polledUntil} ms)`)
})

t.test('logout ends the session everywhere, its stream with session.ended, and a reconnect gets 401', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const { cookie } = await startSession(app)
  const stream = await SseClient.open(`${url}/api/events`, cookie)
  t.teardown(() => stream.close())
  t.equal(stream.status, 200, 'the stream opens with the cookie')
  const order = (await app.inject({ method: 'POST', url: '/api/orders', headers: { ...cookie, ...CSRF }, payload: ORDER })).json()
  await waitFor('the order on the stream', async () => stream.events.some((event) => event.event === 'order.status'))
  t.match(JSON.parse(stream.events[0]!.data!), { orderId: order.id, status: 'Pending Review' })

  const logout = await app.inject({ method: 'POST', url: '/auth/logout', headers: { ...cookie, ...CSRF } })
  t.equal(logout.statusCode, 204)
  t.match(String(logout.headers['set-cookie']), new RegExp(`^${SESSION_COOKIE}=; Max-Age=0; Path=/;.* HttpOnly; Secure; SameSite=Strict$`), 'the cookie is cleared')
  await waitFor('the stream ends', async () => stream.ended)
  t.match(stream.events.at(-1), { event: 'session.ended', data: '{"reason":"logged_out"}' })
  t.equal((await SseClient.open(`${url}/api/events`, cookie)).status, 401, 'a reconnect gets 401, which stops an EventSource')
  t.equal(await status(app, cookie), 401)
  t.equal(await status(app, cookie, '/auth/session'), 401)
})

t.test('a stream of a session that idles out ends; one whose session is in use lives on', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { SESSION_IDLE_TIMEOUT_S: '2' }, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const [idle, used] = [await startSession(app), await startSession(app)]
  const idleStream = await SseClient.open(`${url}/api/events`, idle.cookie)
  const usedStream = await SseClient.open(`${url}/api/events`, used.cookie)
  t.teardown(() => { idleStream.close(); usedStream.close() })
  const started = Date.now()
  while (Date.now() - started < 5000) {
    t.equal(await status(app, used.cookie), 200)
    await sleep(700)
  }
  t.ok(idleStream.ended, 'the idle session\'s stream ended')
  t.match(idleStream.events.at(-1), { event: 'session.ended', data: '{"reason":"expired"}' })
  t.notOk(usedStream.ended, 'the stream of a session in use lives past the idle timeout')
})

t.test('refused and failed requests, and stream reconnections, never renew a session: knocked on every second, it idles out', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { SESSION_IDLE_TIMEOUT_S: '3', SSE_MAX_STREAMS_PER_USER: '1' }, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const [jane, john] = [await startSession(app), await startSession(app, JOHN)]
  const open = await SseClient.open(`${url}/api/events`, jane.cookie)
  t.teardown(() => open.close())
  t.equal(open.status, 200, 'Jane holds the one stream she may')
  const answers = { refusedStream: new Set<number>(), missingOrder: new Set<number>(), reconnect: new Set<number>() }
  const stream = async (cookie: Record<string, string>) => {
    const knock = await SseClient.open(`${url}/api/events`, cookie)
    knock.close()
    return knock.status
  }
  const signedIn = async (cookie: Record<string, string>) => await status(app, cookie, '/auth/session') === 200
  await waitFor('both sessions idle out while knocked on every second', async () => {
    if (await signedIn(jane.cookie)) {
      answers.refusedStream.add(await stream(jane.cookie))
      answers.missingOrder.add(await status(app, jane.cookie, `/api/orders/${randomUUID()}`))
    }
    if (await signedIn(john.cookie)) answers.reconnect.add(await stream(john.cookie))
    await sleep(1000)
    return !await signedIn(jane.cookie) && !await signedIn(john.cookie)
  }, 60_000)
  t.ok(answers.refusedStream.has(429), 'Jane\'s second stream was refused by the cap')
  t.ok(answers.missingOrder.has(404), 'her reads of an order that does not exist failed')
  t.ok(answers.reconnect.has(200), 'John\'s stream reconnected')
  await waitFor('Jane\'s open stream ends', async () => open.ended)
  t.match(open.events.at(-1), { event: 'session.ended', data: '{"reason":"expired"}' })
})

t.test('a new sign-in from a browser ends the session its old cookie held, and that session\'s stream; a failed one ends nothing', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const first = await startSession(app)
  const stream = await SseClient.open(`${url}/api/events`, first.cookie)
  t.teardown(() => stream.close())
  t.equal(stream.status, 200)

  const second = await startSession(app, JOHN, first.cookie)
  t.equal(await status(app, first.cookie), 401, 'the first session has ended')
  await waitFor('its stream ends', async () => stream.ended)
  t.match(stream.events.at(-1), { event: 'session.ended', data: '{"reason":"logged_out"}' })
  t.equal(await status(app, second.cookie), 200, 'the new session works')

  const wrong = await app.inject({ method: 'POST', url: '/auth/session', headers: second.cookie, payload: { ...JANE, password: 'wrong' } })
  t.equal(wrong.statusCode, 401)
  t.equal(await status(app, second.cookie), 200, 'a failed sign-in leaves the session the browser holds')
})

t.test('logout-all on one instance ends a cookie session and a bearer token of the client on another, and their streams', async (t) => {
  const sandbox = await startTestSandbox(t)
  const shared = { DATABASE_URL: await testSchemaUrl(t) }
  const first = await buildTestApp(t, shared, sandbox)
  const second = await buildTestApp(t, { ...shared, REDIS_KEY_PREFIX: first.config.REDIS_KEY_PREFIX }, sandbox)
  const url = await second.listen({ port: 0, host: '127.0.0.1' })
  const { cookie } = await startSession(second)
  const token = await login(second)
  const john = await login(second, 'john@example.com', 'battery-staple')
  const sessionStream = await SseClient.open(`${url}/api/events`, cookie)
  const tokenStream = await SseClient.open(`${url}/api/events`, bearer(token))
  t.teardown(() => { sessionStream.close(); tokenStream.close() })
  const { cookie: mine } = await startSession(first)

  const all = await first.inject({ method: 'POST', url: '/auth/logout-all', headers: { ...mine, ...CSRF } })
  t.equal(all.statusCode, 204)
  await waitFor('both streams end on the other instance', async () => sessionStream.ended && tokenStream.ended, 20_000)
  t.equal(await status(second, cookie), 401, 'the session, on the other instance')
  t.equal(await status(second, bearer(token)), 401, 'the bearer token, on the other instance')
  t.equal(await status(first, mine, '/auth/session'), 401, 'the caller\'s own session')
  t.equal(await status(second, bearer(john)), 200, 'another client is untouched')
})

t.test('a Redis that comes back empty never signs an ended session back in; a new sign-in works', async (t) => {
  const { app, redis } = await buildTestAppOnPrivateRedis(t)
  const ended = await startSession(app)
  const live = await startSession(app)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: { ...ended.cookie, ...CSRF } })).statusCode, 204)
  await redis.restartEmpty()
  await waitFor('Redis connections back', async () => app.redis.status === 'ready', 10_000)
  const refused = await app.inject({ method: 'GET', url: '/api/invoices', headers: ended.cookie })
  t.equal(refused.statusCode, 401, `the logged-out session is still refused ${refused.body}`)
  t.equal(await status(app, live.cookie), 401, 'a live session is lost with Redis: its user signs in again')
  const again = await startSession(app)
  t.equal(await status(app, again.cookie), 200, 'a new sign-in works')
})

t.test('a Redis restored from a copy of its append-only files older than a logout, and a service restart, never sign the session back in', async (t) => {
  const redis = await PrivateRedis.start({ persistent: true })
  t.teardown(() => redis.kill())
  const deployment = { REDIS_URL: redis.url, DATABASE_URL: await testSchemaUrl(t) }
  const before = await buildTestApp(t, deployment)
  const { cookie } = await startSession(before)
  t.equal(await status(before, cookie), 200, 'signed in')
  const backup = redis.copyData()
  t.equal((await before.inject({ method: 'POST', url: '/auth/logout', headers: { ...cookie, ...CSRF } })).statusCode, 204)
  await before.close()

  await redis.restoreData(backup)
  const restored = redis.client(t)
  t.equal((await restored.keys(`${before.config.REDIS_KEY_PREFIX}session:*`)).length, 1, 'the restored Redis holds the logged-out session again')
  t.equal((await restored.keys(`${before.config.REDIS_KEY_PREFIX}auth:blacklist:*`)).length, 0, 'and not its revocation')
  const restarted = await buildTestApp(t, { ...deployment, REDIS_KEY_PREFIX: before.config.REDIS_KEY_PREFIX })
  t.equal(await status(restarted, cookie), 401, 'the logged-out session stays ended')
  t.equal(await status(restarted, cookie, '/auth/session'), 401)
  const again = await startSession(restarted)
  t.equal(await status(restarted, again.cookie), 200, 'a new sign-in works')
})

t.test('a stream ends with session.ended within 5 s of its session lost with Redis\'s data (FLUSHALL), not at its idle end', async (t) => {
  const sandbox = await startTestSandbox(t)
  const { app, redis } = await buildTestAppOnPrivateRedis(t, {}, sandbox)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const { cookie } = await startSession(app)
  const stream = await SseClient.open(`${url}/api/events`, cookie)
  t.teardown(() => stream.close())
  t.equal(stream.status, 200)
  await redis.client(t).flushall()
  t.equal(await status(app, cookie), 401, 'the session is gone')
  await waitFor('the stream ends', async () => stream.ended, 5000)
  t.match(stream.events.at(-1), { event: 'session.ended', data: '{"reason":"expired"}' })
})

t.test('with Redis down, a cookie sign-in answers 503 AUTH_UNAVAILABLE, even failing open, and sets no cookie', async (t) => {
  const { app, redis } = await buildTestAppOnPrivateRedis(t, { AUTH_BLACKLIST_FAIL_CLOSED: 'false' })
  await redis.kill()
  const answer = await app.inject({ method: 'POST', url: '/auth/session', payload: { email: 'jane@example.com', password: 'correct-horse' } })
  t.equal(answer.statusCode, 503)
  t.equal(answer.json().code, 'AUTH_UNAVAILABLE')
  t.equal(answer.headers['set-cookie'], undefined)
})

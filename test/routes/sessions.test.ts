import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { buildTestApp, startTestSandbox, testSchemaUrl } from '../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'
import { SseClient } from '../helpers/sse.js'
import { bearer, login } from '../helpers/tokens.js'
import { SESSION_COOKIE } from '../../plugins/app/sessions.js'

const JANE = { email: 'jane@example.com', password: 'correct-horse' }
const ORDER = { productId: 1, billingCycle: 'monthly' }
const CSRF = { 'x-csrf': '1' }

/** Signs Jane in with a cookie session; answers the cookie header a browser would send, and the answer. */
async function startSession (app: FastifyInstance): Promise<{ cookie: { cookie: string }, response: LightMyRequestResponse }> {
  const response = await app.inject({ method: 'POST', url: '/auth/session', payload: JANE })
  if (response.statusCode !== 200) throw new Error(`sign-in failed: ${response.statusCode} ${response.body}`)
  const value = response.cookies.find((cookie) => cookie.name === SESSION_COOKIE)?.value
  return { cookie: { cookie: `${SESSION_COOKIE}=${value}` }, response }
}

const status = async (app: FastifyInstance, headers: Record<string, string>, url = '/api/invoices') =>
  (await app.inject({ method: 'GET', url, headers })).statusCode

t.test('POST /auth/session sets one HttpOnly, Secure, SameSite=Strict __Host- cookie, opaque, and answers no token', async (t) => {
  const app = await buildTestApp(t)
  const { cookie, response } = await startSession(app)
  const setCookie = String(response.headers['set-cookie'])
  t.match(setCookie, new RegExp(`^${SESSION_COOKIE}=[A-Za-z0-9_-]{43}; Max-Age=43200; Path=/; HttpOnly; Secure; SameSite=Strict$`), 'the cookie and its attributes')
  t.notMatch(setCookie, /Domain=/i, 'no Domain: the cookie stays with this host')
  const value = cookie.cookie.split('=')[1]!
  t.notMatch(value, /\./, 'not a JWT')
  const body = response.json()
  t.same(Object.keys(body).sort(), ['clientId', 'expiresAt', 'idleExpiresAt'])
  t.equal(body.clientId, 1)
  t.ok(Math.abs(Date.parse(body.expiresAt) - Date.now() - 43_200_000) < 5000, 'ends 12 hours after sign-in')
  t.ok(Math.abs(Date.parse(body.idleExpiresAt) - Date.now() - 1_800_000) < 5000, 'or after 30 minutes unused')
  t.notMatch(response.body, value, 'the body does not hold the cookie')
  t.notMatch(await app.redis.keys(`${app.config.REDIS_KEY_PREFIX}*`).then((keys) => keys.join(' ')), value, 'Redis keeps a hash of the cookie, not the cookie')

  t.equal(await status(app, cookie), 200, 'the invoices, by the cookie')
  const session = await app.inject({ method: 'GET', url: '/auth/session', headers: cookie })
  t.equal(session.statusCode, 200)
  t.same(session.json().clientId, 1)
  t.equal(await status(app, {}, '/auth/session'), 401, 'no cookie: 401')
  const forged = await app.inject({ method: 'GET', url: '/api/invoices', headers: { cookie: `${SESSION_COOKIE}=forged` } })
  t.equal(forged.statusCode, 401, 'an unknown cookie: 401')
  t.match(String(forged.headers['set-cookie']), new RegExp(`^${SESSION_COOKIE}=; Max-Age=0; Path=/;.* HttpOnly; Secure; SameSite=Strict$`), 'and the cookie is cleared')
  const token = await login(app)
  t.equal(await status(app, bearer(token), '/auth/session'), 401, 'a bearer token has no cookie session')
})

t.test('sign-in through /auth/session has the limits and errors of /auth/login, and shares its address limit', async (t) => {
  const app = await buildTestApp(t, { LOGIN_RATE_LIMIT_MAX: '4', LOGIN_ACCOUNT_FAILURES_MAX: '2' })
  const wrong = await app.inject({ method: 'POST', url: '/auth/session', payload: { ...JANE, password: 'wrong' } })
  t.equal(wrong.statusCode, 401)
  t.equal(wrong.json().code, 'INVALID_CREDENTIALS')
  t.equal(wrong.headers['set-cookie'], undefined, 'no cookie')
  t.equal((await app.inject({ method: 'POST', url: '/auth/login', payload: { ...JANE, password: 'wrong' } })).statusCode, 401)
  const locked = await app.inject({ method: 'POST', url: '/auth/session', payload: JANE })
  t.equal(locked.statusCode, 429, 'the account limit counts failures of both ways')
  t.equal(locked.json().code, 'TOO_MANY_FAILED_SIGN_INS')
  t.equal((await app.inject({ method: 'POST', url: '/auth/login', payload: JANE })).json().code, 'TOO_MANY_FAILED_SIGN_INS')
  const limited = await app.inject({ method: 'POST', url: '/auth/session', payload: JANE })
  t.equal(limited.statusCode, 429, 'the fifth sign-in from the address in a minute, by either way')
  t.equal(limited.json().code, 'RATE_LIMITED')
  t.equal((await app.inject({ method: 'POST', url: '/auth/session', payload: { email: 'tom@example.com', password: 'second-factor' }, remoteAddress: '10.0.0.2' })).json().code, 'TWO_FACTOR_REQUIRED')
})

t.test('CSRF: an unsafe request made with the cookie needs x-csrf: 1 and a same-site origin; bearer requests are not checked', async (t) => {
  const portal = 'https://portal.example.com'
  const app = await buildTestApp(t, { CORS_ORIGIN: portal })
  const { cookie } = await startSession(app)
  const place = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/api/orders', headers: { ...cookie, ...headers, 'x-correlation-id': 'csrf-check' }, payload: ORDER })
  const refusals = [
    await place({}),
    await place({ 'x-csrf': 'yes' }),
    await place({ ...CSRF, 'sec-fetch-site': 'cross-site' }),
    await place({ ...CSRF, origin: 'https://evil.example.net' })
  ]
  for (const refusal of refusals) {
    t.equal(refusal.statusCode, 403)
    t.match(refusal.json(), { code: 'CSRF_REJECTED', correlationId: 'csrf-check' })
  }
  t.equal((await place({ ...CSRF, origin: portal, 'sec-fetch-site': 'same-site' })).statusCode, 201, 'from the portal\'s origin')
  t.equal((await place({ ...CSRF, origin: 'http://localhost:80', 'sec-fetch-site': 'same-origin' })).statusCode, 201, 'from the service\'s own origin')
  t.equal((await place(CSRF)).statusCode, 201, 'no Origin (same-origin GET-like tools): the header suffices')
  const token = await login(app)
  t.equal((await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: ORDER })).statusCode, 201, 'a bearer token needs no header')
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: cookie })).statusCode, 403, 'logout too needs the header')
  t.equal(await status(app, cookie), 200, 'a GET needs none')
})

t.test('a refusal is logged at warn with the request\'s correlation id', async (t) => {
  const app = await buildTestApp(t, { LOG_LEVEL: 'info' })
  const { cookie } = await startSession(app)
  await app.inject({ method: 'POST', url: '/api/orders', headers: { ...cookie, 'x-correlation-id': 'csrf-logged' }, payload: ORDER })
  await app.close()
  const { readFileSync } = await import('node:fs')
  const lines = readFileSync(`${app.config.LOG_DIR}/combined.log`, 'utf8').trim().split('\n').map((line) => JSON.parse(line))
  t.match(lines.find((line) => line.correlationId === 'csrf-logged' && line.level === 40), { message: /cross-site/, reason: 'no x-csrf: 1 header' })
})

t.test('CORS for a credentialed portal on another origin: credentials, max-age, error answers, exposed headers', async (t) => {
  const portal = 'http://localhost:5173'
  const app = await buildTestApp(t, { CORS_ORIGIN: portal })
  const preflight = await app.inject({ method: 'OPTIONS', url: '/api/orders', headers: { origin: portal, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,x-csrf,idempotency-key' } })
  t.equal(preflight.statusCode, 204)
  t.equal(preflight.headers['access-control-allow-origin'], portal)
  t.equal(preflight.headers['access-control-allow-credentials'], 'true')
  t.equal(preflight.headers['access-control-max-age'], '7200', 'the browser reuses a preflight for two hours')
  t.match(preflight.headers['access-control-allow-headers'], /x-csrf/)
  const other = await app.inject({ method: 'OPTIONS', url: '/api/orders', headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' } })
  t.not(other.headers['access-control-allow-origin'], 'http://evil.example', 'no other origin')
  for (const [url, statusCode] of [['/api/invoices', 401], ['/api/nothing-here', 404]] as const) {
    const answer = await app.inject({ method: 'GET', url, headers: { origin: portal } })
    t.equal(answer.statusCode, statusCode)
    t.equal(answer.headers['access-control-allow-origin'], portal, `a ${statusCode} is readable by the page`)
    t.equal(answer.headers['access-control-allow-credentials'], 'true')
    t.match(answer.headers['access-control-expose-headers'], /x-correlation-id.*retry-after.*x-ratelimit-remaining/)
  }
})

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
  const ended = Date.now()
  await waitFor('both streams end on the other instance', async () => sessionStream.ended && tokenStream.ended, 2000)
  t.ok(Date.now() - ended <= 2000, 'within 2 s')
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

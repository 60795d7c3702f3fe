import t from 'tap'
import { buildTestApp } from '../helpers/app.js'
import { CSRF, JANE, ORDER, startSession, status } from '../helpers/sessions.js'
import { bearer, login } from '../helpers/tokens.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'

t.test('POST /auth/session sets one HttpOnly, Secure, SameSite=Strict __Host- cookie, opaque, and answers no token', async (t) => {
  const app = await buildTestApp(t)
  const { cookie, response } = await startSession(app)
  const setCookie = String(response.headers['set-cookie'])
  t.match(setCookie, new RegExp(`^${SESSION_COOKIE}=[A-Za-z0-9_-]{43}; Max-Age=43200; Path=/; HttpOnly; Secure; SameSite=Strict$`), 'the cookie and its attributes')
  t.notMatch(setCookie, /Domain=/i, 'no Domain: the cookie stays with this host')
  const value = cookie.cookie.split('=')[1]!
  t.notMatch(value, /\./, 'not a JWT')
  const body = response.json()
  t.same(Object.keys(body).sort(), ['clientId', 'email', 'expiresAt', 'idleExpiresAt', 'name', 'signIn'])
  t.match(body, { name: 'Jane Doe', email: JANE.email, signIn: 'password' })
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

t.test('PASSWORD_SIGN_IN=false: POST /auth/session takes no password, and says where browsers sign in; POST /auth/login still does', async (t) => {
  const app = await buildTestApp(t, { PASSWORD_SIGN_IN: 'false' })
  const refused = await app.inject({ method: 'POST', url: '/auth/session', payload: JANE })
  t.equal(refused.statusCode, 403)
  t.equal(refused.json().code, 'PASSWORD_SIGN_IN_OFF')
  t.match(refused.json().message, '/auth/oidc/login')
  t.notOk(refused.headers['set-cookie'], 'no session')
  t.equal((await app.inject({ method: 'POST', url: '/auth/login', payload: JANE })).statusCode, 200)
})

t.test('no page on another site can sign a browser in: a cross-site sign-in is refused before billing is asked', async (t) => {
  const app = await buildTestApp(t, { CORS_ORIGIN: 'https://portal.example.com' })
  for (const [headers, rule] of [[{ 'sec-fetch-site': 'cross-site' }, /Sec-Fetch-Site: cross-site/], [{ origin: 'https://evil.example.net' }, /Origin is none of this service's own/]] as const) {
    const refused = await app.inject({ method: 'POST', url: '/auth/session', headers, payload: JANE })
    t.equal(refused.statusCode, 403)
    t.match(refused.json(), { code: 'CSRF_REJECTED', message: rule }, 'the message names the rule')
    t.equal(refused.headers['set-cookie'], undefined)
  }
  t.equal((await app.inject({ method: 'POST', url: '/auth/session', headers: { origin: 'https://portal.example.com', 'sec-fetch-site': 'same-site' }, payload: JANE })).statusCode, 200, 'the portal signs in')
})

t.test('CSRF: an unsafe request made with the cookie needs x-csrf: 1 and a same-site origin; bearer requests are not checked', async (t) => {
  const portal = 'https://portal.example.com'
  const app = await buildTestApp(t, { CORS_ORIGIN: portal })
  const { cookie } = await startSession(app)
  const place = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/api/orders', headers: { ...cookie, ...headers, 'x-correlation-id': 'csrf-check' }, payload: ORDER })
  // Each refusal's message names the rule that refused it, so the page's developer knows what to mend.
  const refusals: Array<[Record<string, string>, RegExp]> = [
    [{}, /needs the header x-csrf: 1, and it was not sent$/],
    [{ 'x-csrf': 'yes' }, /needs the header x-csrf: 1, and it was sent with another value$/],
    [{ ...CSRF, 'sec-fetch-site': 'cross-site' }, /comes from another site \(Sec-Fetch-Site: cross-site\)$/],
    [{ ...CSRF, origin: 'https://evil.example.net' }, /Origin is none of this service's own \(its own origin, PUBLIC_ORIGIN, CORS_ORIGIN\)$/],
    [{ ...CSRF, origin: portal, 'sec-fetch-site': 'cross-site' }, /Sec-Fetch-Site: cross-site/]
  ]
  for (const [headers, message] of refusals) {
    const refusal = await place(headers)
    t.equal(refusal.statusCode, 403)
    t.match(refusal.json(), { code: 'CSRF_REJECTED', correlationId: 'csrf-check', message }, JSON.stringify(headers))
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
  t.match(lines.find((line) => line.correlationId === 'csrf-logged' && line.level === 40), { message: /cross-site/, reason: /x-csrf: 1, and it was not sent/ })
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

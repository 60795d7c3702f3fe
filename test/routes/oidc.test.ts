import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { decodeJwt, generateKeyPair } from 'jose'
import { buildTestApp, scopeWith, startTestSandbox, testKeyPrefix, testSchemaUrl } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { SseClient } from '../helpers/sse.js'
import { OIDC_CLIENT, PEOPLE, PORTAL_ORIGIN, signInAtProvider, startTestProvider, type TestProvider } from '../helpers/oidc-provider.js'
import { oidcLoginKey, sessionKey } from '../../plugins/app/redis-keys.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'
import { CHOICE_COOKIE, LOGIN_COOKIE } from '../../plugins/app/access/oidc/routes.js'

const cookieOf = (setCookie: string | string[] | undefined, name: string) =>
  [setCookie ?? []].flat().find((line) => line.startsWith(`${name}=`))?.split(';')[0]

async function withProvider (t: Test, options?: Parameters<typeof startTestProvider>[0]): Promise<TestProvider> {
  const provider = await startTestProvider(options)
  t.teardown(() => provider.close())
  return provider
}

/** Begins a sign-in as a browser's navigation would; answers the provider's URL and the login cookie. */
async function beginSignIn (app: FastifyInstance, returnTo = '/invoices?page=2') {
  const response = await app.inject({ method: 'GET', url: `/auth/oidc/login?returnTo=${encodeURIComponent(returnTo)}` })
  if (response.statusCode !== 302) throw new Error(`login answered ${response.statusCode} ${response.body}`)
  return { location: response.headers.location!, loginCookie: cookieOf(response.headers['set-cookie'], LOGIN_COOKIE)!, setCookie: String(response.headers['set-cookie']) }
}

/** The callback as the browser makes it, with the cookies it holds. */
const callback = (app: FastifyInstance, back: URL, cookie: string) => app.inject({ method: 'GET', url: `${back.pathname}${back.search}`, headers: { cookie } })

t.test('sign in through the provider: the code flow with PKCE, a session cookie, and who signed in', async (t) => {
  const provider = await withProvider(t)
  const app = await buildTestApp(t, provider.settings)
  const { location, loginCookie, setCookie } = await beginSignIn(app)
  t.match(setCookie, new RegExp(`^${LOGIN_COOKIE}=[A-Za-z0-9_-]{43}; Max-Age=600; Path=/; HttpOnly; Secure; SameSite=Lax$`), 'bound to this browser by a short-lived HttpOnly cookie')
  const authorization = new URL(location)
  t.equal(authorization.origin, provider.issuer)
  t.match(Object.fromEntries(authorization.searchParams), {
    client_id: 'portal-bff',
    response_type: 'code',
    code_challenge_method: 'S256',
    scope: 'openid profile email',
    redirect_uri: `${PORTAL_ORIGIN}/auth/oidc/callback`,
    state: /.{20,}/,
    nonce: /.{20,}/,
    code_challenge: /.{43}/
  })
  t.notMatch(location, loginCookie.split('=')[1]!, 'the cookie holds a reference, not the state')

  const back = await signInAtProvider(location, 'jane')
  const signedIn = await callback(app, back, loginCookie)
  t.equal(signedIn.statusCode, 302)
  t.equal(signedIn.headers.location, '/invoices?page=2', 'back where the page asked')
  t.equal(signedIn.body, '', 'no token in the body')
  const session = cookieOf(signedIn.headers['set-cookie'], SESSION_COOKIE)!
  t.ok(session, 'a session cookie')
  t.match(String(signedIn.headers['set-cookie']), `${LOGIN_COOKIE}=; Max-Age=0`, 'the login cookie is cleared')
  const setCookies = [signedIn.headers['set-cookie'] ?? []].flat()
  t.equal(setCookies.length, 2, 'no cookie but the session\'s and the cleared login cookie')

  const info = await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })
  t.equal(info.statusCode, 200)
  t.match(info.json(), { clientId: 1, signIn: 'oidc', name: PEOPLE.jane!.name, email: 'jane@example.com' })
  t.equal((await app.inject({ method: 'GET', url: '/api/invoices', headers: { cookie: session } })).statusCode, 200, 'the session reads invoices')
  for (const response of [signedIn, info]) t.notMatch(`${JSON.stringify(response.headers)}${response.body}`, /eyJ[A-Za-z0-9_-]+\./, 'no provider token in any header or body')

  // A second sign-in from the same browser replaces the session its cookie holds (decision 0090).
  const second = await beginSignIn(app, '/')
  const replaced = await callback(app, await signInAtProvider(second.location, 'jane'), `${second.loginCookie}; ${session}`)
  const newSession = cookieOf(replaced.headers['set-cookie'], SESSION_COOKIE)!
  t.equal((await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })).statusCode, 401, 'the old session has ended')
  t.equal((await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: newSession } })).statusCode, 200)

  // The ID token the session keeps (for the end-session hint) is sealed in Redis, never in the clear.
  const stored = (await app.redis.get(sessionKey(app.config.REDIS_KEY_PREFIX, createHash('sha256').update(newSession.split('=')[1]!).digest('base64url'))))!
  const identity = JSON.parse(Buffer.from(stored.split(':')[3]!, 'base64url').toString('utf8'))
  const idToken = scopeWith(app, 'oidcSignIn').oidcSignIn!.options.sealer.unseal(identity.sealedIdToken)!
  t.match(idToken, /^eyJ/, 'it unseals to the ID token')
  t.notMatch(`${stored}${JSON.stringify(identity)}`, idToken.split('.')[1]!, 'its claims are not readable at rest')

  const again = await callback(app, back, loginCookie)
  t.equal(again.headers.location, '/?signInError=login_expired', 'a sign-in under way is used once')
  t.notOk(cookieOf(again.headers['set-cookie'], SESSION_COOKIE))

  const logout = await app.inject({ method: 'POST', url: '/auth/logout', headers: { cookie: newSession, 'x-csrf': '1' } })
  t.equal(logout.statusCode, 200)
  const logoutUrl = new URL(logout.json().logoutUrl)
  t.equal(`${logoutUrl.origin}${logoutUrl.pathname}`, `${provider.issuer}/session/end`, 'the provider\'s end-session endpoint')
  t.match(Object.fromEntries(logoutUrl.searchParams), { client_id: 'portal-bff', post_logout_redirect_uri: `${PORTAL_ORIGIN}/` })
  t.notOk(logoutUrl.searchParams.has('id_token_hint'), 'no ID token in what the page gets (decision 0102)')
  t.notMatch(logout.body, /eyJ/)
  t.equal((await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: newSession } })).statusCode, 401, 'signed out here')
})

t.test('a person who acts for several billing clients picks one after sign-in, and the session holds that one', async (t) => {
  const provider = await withProvider(t)
  const app = await buildTestApp(t, provider.settings)
  const { location, loginCookie } = await beginSignIn(app, '/orders')
  const back = await callback(app, await signInAtProvider(location, 'john'), loginCookie)
  t.equal(back.headers.location, '/orders?chooseClient=1', 'back to the page, asked to choose')
  t.notOk(cookieOf(back.headers['set-cookie'], SESSION_COOKIE), 'no session before the choice')
  t.match(String(back.headers['set-cookie']), new RegExp(`${CHOICE_COOKIE}=[A-Za-z0-9_-]{43}; Max-Age=600; Path=/; HttpOnly; Secure; SameSite=Strict`))
  const choiceCookie = cookieOf(back.headers['set-cookie'], CHOICE_COOKIE)!

  const offered = await app.inject({ method: 'GET', url: '/auth/oidc/choice', headers: { cookie: choiceCookie } })
  t.equal(offered.statusCode, 200)
  t.same(offered.json(), { name: PEOPLE.john!.name, email: 'john@example.com', clients: [{ clientId: 2, name: 'John Smith' }, { clientId: 3, name: 'Nina Newcomer' }] }, 'his own client first')
  t.notMatch(offered.body, /eyJ/, 'no token in the list')
  t.match((await app.inject({ method: 'GET', url: '/auth/oidc/choice' })).json(), { code: 'NO_CLIENT_CHOICE' }, 'no cookie, no choice')

  const choose = (clientId: number, headers: Record<string, string> = {}) => app.inject({ method: 'POST', url: '/auth/oidc/choice', headers: { cookie: choiceCookie, ...headers }, payload: { clientId } })
  t.match((await choose(1)).json(), { code: 'NO_CLIENT_ACCOUNT' }, 'a client he does not act for is refused')
  t.match((await choose(3, { origin: 'https://evil.example.net' })).json(), { code: 'CSRF_REJECTED' }, 'from another site: refused')
  const chosen = await choose(3)
  t.equal(chosen.statusCode, 200)
  t.match(chosen.json(), { clientId: 3, signIn: 'oidc', email: 'john@example.com', name: PEOPLE.john!.name })
  const session = cookieOf(chosen.headers['set-cookie'], SESSION_COOKIE)!
  t.ok(session, 'the session cookie')
  t.match(String(chosen.headers['set-cookie']), `${CHOICE_COOKIE}=; Max-Age=0`, 'the choice cookie is cleared')
  t.match((await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })).json(), { clientId: 3 }, 'the session acts for the client picked')
  t.equal((await choose(2)).json().code, 'NO_CLIENT_CHOICE', 'a choice is made once')

  // One client: no choice, as before.
  const jane = await beginSignIn(app, '/orders')
  t.equal((await callback(app, await signInAtProvider(jane.location, 'jane'), jane.loginCookie)).headers.location, '/orders')
})

t.test('with Redis unavailable, reading and making a choice of client both answer 503 AUTH_UNAVAILABLE; a choice whose session could not be stored is made again', async (t) => {
  const provider = await withProvider(t)
  const { app, redis } = await buildTestAppOnPrivateRedis(t, provider.settings)
  const toChoice = async () => {
    const { location, loginCookie } = await beginSignIn(app, '/orders')
    const back = await callback(app, await signInAtProvider(location, 'john'), loginCookie)
    return cookieOf(back.headers['set-cookie'], CHOICE_COOKIE)!
  }
  const read = (cookie: string) => app.inject({ method: 'GET', url: '/auth/oidc/choice', headers: { cookie } })
  const choose = (cookie: string) => app.inject({ method: 'POST', url: '/auth/oidc/choice', headers: { cookie }, payload: { clientId: 3 } })
  const unavailable = { statusCode: 503, error: 'Service Unavailable', code: 'AUTH_UNAVAILABLE', message: 'Authentication is temporarily unavailable' }

  // Redis refuses writes: the choice is read, but no session can be stored. The choice stays for the retry.
  const refused = await toChoice()
  const admin = redis.client(t)
  await admin.config('SET', 'maxmemory-policy', 'noeviction')
  await admin.config('SET', 'maxmemory', '1')
  const notStored = await choose(refused)
  t.equal(notStored.statusCode, 503, 'no session could be stored')
  t.match(notStored.json(), unavailable)
  t.notOk(cookieOf(notStored.headers['set-cookie'], SESSION_COOKIE), 'no session cookie')
  await admin.config('SET', 'maxmemory', '0')
  // Retried twice at once (a double click): one takes the choice; the other's session is ended, its cookie never sent.
  const both = await Promise.all([choose(refused), choose(refused)])
  t.same(both.map((answer) => answer.statusCode).sort(), [200, 401], 'the retry finds the choice; once')
  const retried = both.find((answer) => answer.statusCode === 200) ?? both[0]!
  const lost = both.find((answer) => answer.statusCode === 401) ?? both[1]!
  t.equal(lost.json().code, 'NO_CLIENT_CHOICE')
  t.notOk(cookieOf(lost.headers['set-cookie'], SESSION_COOKIE), 'the request that lost sets no session cookie')
  const session = cookieOf(retried.headers['set-cookie'], SESSION_COOKIE) ?? 'none'
  t.match((await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })).json(), { clientId: 3 }, 'for the client picked')

  const pending = await toChoice()
  t.equal((await read(pending)).statusCode, 200, 'a choice under way')
  await redis.kill()
  const answers = [await read(pending), await choose(pending)]
  for (const [answer, what] of answers.map((answer, index) => [answer, ['GET', 'POST'][index]] as const)) {
    t.equal(answer.statusCode, 503, `${what}: 503`)
    const { correlationId, ...body } = answer.json()
    t.same(body, unavailable, `${what}: the documented body`)
    t.equal(correlationId, answer.headers['x-correlation-id'])
    t.notMatch(answer.body, /ECONNREFUSED|127\.0\.0\.1|Connection is closed|at .+\.[jt]s:\d+|stack/i, `${what}: no driver text, host or stack`)
    t.notOk(cookieOf(answer.headers['set-cookie'], SESSION_COOKIE), `${what}: no session cookie`)
  }
})

t.test('a callback that is not this browser\'s sign-in starts no session', async (t) => {
  const provider = await withProvider(t)
  const app = await buildTestApp(t, provider.settings)
  const mine = await beginSignIn(app, '/orders')
  const theirs = await beginSignIn(app, '/orders')
  const back = await signInAtProvider(mine.location, 'jane')
  // Another browser's cookie with this browser's code: its state does not match.
  const crossed = await callback(app, back, theirs.loginCookie)
  t.equal(crossed.headers.location, '/orders?signInError=state_mismatch')
  t.notOk(cookieOf(crossed.headers['set-cookie'], SESSION_COOKIE))
  const noCookie = await callback(app, back, '')
  t.equal(noCookie.headers.location, '/?signInError=login_expired', 'no cookie: no sign-in under way')

  // The right state and cookie, but an ID token whose nonce is not the one this sign-in sent.
  const fresh = await beginSignIn(app, '/orders')
  const other = await beginSignIn(app, '/orders')
  const otherBack = await signInAtProvider(other.location, 'jane')
  const freshState = new URL(fresh.location).searchParams.get('state')!
  otherBack.searchParams.set('state', freshState)
  const wrongNonce = await callback(app, otherBack, fresh.loginCookie)
  t.match(wrongNonce.headers.location, /^\/orders\?signInError=(token_refused|provider_refused)$/, 'the code was issued for another nonce and verifier')
  t.notOk(cookieOf(wrongNonce.headers['set-cookie'], SESSION_COOKIE))

  // This browser's own code, state and verifier, but the nonce it kept is not the one the ID token carries.
  const kept = await beginSignIn(app, '/orders')
  const reference = kept.loginCookie.split('=')[1]!
  const key = oidcLoginKey(app.config.REDIS_KEY_PREFIX, reference)
  await app.redis.set(key, JSON.stringify({ ...JSON.parse((await app.redis.get(key))!), nonce: 'another-nonce' }), 'EX', 600)
  const nonceRefused = await callback(app, await signInAtProvider(kept.location, 'jane'), kept.loginCookie)
  t.equal(nonceRefused.headers.location, '/orders?signInError=token_refused', 'an ID token for another nonce')
  t.notOk(cookieOf(nonceRefused.headers['set-cookie'], SESSION_COOKIE))

  const stranger = await beginSignIn(app, '/')
  t.equal((await callback(app, await signInAtProvider(stranger.location, 'stranger'), stranger.loginCookie)).headers.location, '/?signInError=no_client_account')
  const unverified = await beginSignIn(app, '/')
  t.equal((await callback(app, await signInAtProvider(unverified.location, 'unverified'), unverified.loginCookie)).headers.location, '/?signInError=email_unverified', 'an email the provider has not verified names no billing client')

  await app.close()
  const log = readFileSync(join(app.config.LOG_DIR, 'combined.log'), 'utf8')
  t.match(log, 'OpenID Connect sign-in refused', 'the refusals are logged')
  t.notMatch(log, OIDC_CLIENT.secret, 'never the client secret')
  t.notMatch(log, /eyJ[A-Za-z0-9_-]+\./, 'nor a token of the provider')
})

t.test('an ID token not signed by the provider\'s published keys starts no session', async (t) => {
  const provider = await withProvider(t, { publishesOtherKeys: true })
  const app = await buildTestApp(t, provider.settings)
  const { location, loginCookie } = await beginSignIn(app, '/')
  const refused = await callback(app, await signInAtProvider(location, 'jane'), loginCookie)
  t.equal(refused.headers.location, '/?signInError=token_refused')
  t.notOk(cookieOf(refused.headers['set-cookie'], SESSION_COOKIE))
})

t.test('returnTo is a path on this site, never another host', async (t) => {
  const provider = await withProvider(t)
  const app = await buildTestApp(t, provider.settings)
  for (const returnTo of ['https://evil.example/', '//evil.example/x', '/\\evil.example', 'evil.example', '/\r\nSet-Cookie:x', '/a b', 'javascript:alert(1)']) {
    const response = await app.inject({ method: 'GET', url: `/auth/oidc/login?returnTo=${encodeURIComponent(returnTo)}` })
    t.equal(response.statusCode, 400, returnTo)
    t.notOk(response.headers['set-cookie'], `${returnTo}: no sign-in begun`)
  }
  t.equal((await app.inject({ method: 'GET', url: '/auth/oidc/login' })).statusCode, 302, 'without one, back to /')
})

t.test('beginning sign-ins shares the address\'s sign-in limit with password sign-in', async (t) => {
  const provider = await withProvider(t)
  const app = await buildTestApp(t, { ...provider.settings, LOGIN_RATE_LIMIT_MAX: '2', PASSWORD_SIGN_IN: 'true' })
  t.equal((await app.inject({ method: 'POST', url: '/auth/session', payload: { email: 'jane@example.com', password: 'correct-horse' } })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/auth/oidc/login' })).statusCode, 302)
  const limited = await app.inject({ method: 'GET', url: '/auth/oidc/login' })
  t.equal(limited.statusCode, 429)
  t.equal(limited.json().code, 'RATE_LIMITED')
  t.notOk(limited.headers['set-cookie'], 'no sign-in begun')
})

t.test('a provider that does not answer at start: the service starts, its OpenID Connect sign-in answers 503', async (t) => {
  const app = await buildTestApp(t, { OIDC_ISSUER: 'http://127.0.0.1:9/', OIDC_CLIENT_ID: 'portal-bff', OIDC_CLIENT_SECRET: 'secret', UPSTREAM_TIMEOUT_MS: '1000' })
  const login = await app.inject({ method: 'GET', url: '/auth/oidc/login' })
  t.equal(login.statusCode, 503)
  t.equal(login.json().code, 'OIDC_UNAVAILABLE')
  t.equal((await app.inject({ method: 'GET', url: '/health/live' })).statusCode, 200)
})

t.test('without OIDC_ISSUER there is no OpenID Connect route', async (t) => {
  const app = await buildTestApp(t)
  t.equal((await app.inject({ method: 'GET', url: '/auth/oidc/login' })).statusCode, 404)
  t.same((await app.inject({ method: 'GET', url: '/auth/sign-in-methods' })).json(), { password: true, oidc: false }, 'the page offers its password form alone')
})

t.test('GET /auth/sign-in-methods tells the page which ways to offer', async (t) => {
  const provider = await withProvider(t)
  const methods = async (settings: Record<string, string>) => (await (await buildTestApp(t, settings)).inject({ method: 'GET', url: '/auth/sign-in-methods' })).json()
  t.same(await methods(provider.settings), { password: false, oidc: true }, 'the provider alone, by default')
  t.same(await methods({ ...provider.settings, PASSWORD_SIGN_IN: 'true' }), { password: true, oidc: true }, 'both')
})

t.test('back-channel logout: a logout token for a sid ends its session, and the session\'s stream on another instance; invalid tokens are refused', async (t) => {
  const provider = await withProvider(t)
  const shared = { ...provider.settings, DATABASE_URL: await testSchemaUrl(t), REDIS_KEY_PREFIX: testKeyPrefix() }
  const sandbox = await startTestSandbox(t)
  const first = await buildTestApp(t, shared, sandbox)
  const second = await buildTestApp(t, shared, sandbox)
  const secondUrl = await second.listen({ port: 0, host: '127.0.0.1' })
  const signIn = async () => {
    const { location, loginCookie } = await beginSignIn(first, '/')
    const signedIn = await callback(first, await signInAtProvider(location, 'jane'), loginCookie)
    return cookieOf(signedIn.headers['set-cookie'], SESSION_COOKIE)!
  }
  const session = await signIn()
  const otherSession = await signIn()
  const stream = await SseClient.open(`${secondUrl}/api/events`, { cookie: session })
  const other = await SseClient.open(`${secondUrl}/api/events`, { cookie: otherSession })
  t.teardown(() => { stream.close(); other.close() })
  t.equal(stream.status, 200)
  const sid = await sidOf(first, provider, session)

  const backchannel = async (logoutToken: string) => first.inject({ method: 'POST', url: '/auth/oidc/backchannel-logout', payload: `logout_token=${encodeURIComponent(logoutToken)}`, headers: { 'content-type': 'application/x-www-form-urlencoded' } })
  const { privateKey: strangerKey } = await generateKeyPair('RS256')
  const invalid: Array<[string, Promise<string>]> = [
    ['a wrong signature', provider.logoutToken({ sid }, strangerKey)],
    ['a wrong aud', provider.logoutToken({ sid, aud: 'another-client' })],
    ['a nonce', provider.logoutToken({ sid, nonce: 'n-0S6_WzA2Mj' })],
    ['no events', provider.logoutToken({ sid, events: undefined })],
    ['another event', provider.logoutToken({ sid, events: { 'https://example.com/other-event': {} } })],
    ['neither sid nor sub', provider.logoutToken({ sub: undefined })]
  ]
  for (const [what, token] of invalid) {
    const refused = await backchannel(await token)
    t.equal(refused.statusCode, 400, what)
    t.equal(refused.json().code, 'INVALID_LOGOUT_TOKEN', what)
  }
  t.equal((await first.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })).statusCode, 200, 'no invalid token ended the session')
  t.notOk(stream.ended)

  t.equal((await backchannel(await provider.logoutToken({ sid }))).statusCode, 200)
  await waitFor('the stream on the other instance to end', async () => stream.ended, 20_000)
  t.same(stream.events.filter((event) => event.event === 'session.ended').map((event) => JSON.parse(event.data ?? '{}').reason), ['logged_out'])
  t.equal((await second.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })).statusCode, 401, 'ended on the other instance too')
  t.notOk(other.ended, 'a session of another provider session goes on')
  t.equal((await first.inject({ method: 'GET', url: '/auth/session', headers: { cookie: otherSession } })).statusCode, 200)

  t.equal((await backchannel(await provider.logoutToken({ sid: undefined, sub: 'jane' }))).statusCode, 200, 'by sub: every session of the person')
  await waitFor('the other stream to end', async () => other.ended, 2000)
  t.equal((await first.inject({ method: 'GET', url: '/auth/session', headers: { cookie: otherSession } })).statusCode, 401)
})

/** The provider's session a cookie session began in, read back from the ID token it keeps (sealed). */
async function sidOf (app: FastifyInstance, provider: TestProvider, cookie: string): Promise<string> {
  const logout = await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie } })
  if (logout.statusCode !== 200) throw new Error('no session')
  const session = await scopeWith(app, 'sessions').sessions.read(cookie.split('=')[1]!)
  const idToken = scopeWith(app, 'oidcSignIn').oidcSignIn!.options.sealer.unseal(session!.identity.sealedIdToken!)!
  const { sid } = decodeJwt(idToken)
  if (typeof sid !== 'string') throw new Error(`the ID token from ${provider.issuer} names no sid`)
  return sid
}

import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../helpers/app.js'
import { CSRF, JANE, ORDER, startSession } from '../helpers/sessions.js'

// Which Origin a cookie request may come from (CONTRACT §11): PUBLIC_ORIGIN, the request's own
// origin as Fastify sees it, or CORS_ORIGIN. Behind a TLS-terminating proxy the browser says
// `Origin: https://portal…` while the service is asked over plain HTTP.

const PORTAL = 'https://portal.example.com'
const FOREIGN = 'https://evil.example.net'
/** The upstream's address, as a proxy that rewrites Host (nginx's default) sends it, with no X-Forwarded-Host. */
const UPSTREAM_HOST = '127.0.0.1:3000'
/** Each case signs in twice from one address: room for all of a test's. */
const SIGN_INS = { LOGIN_RATE_LIMIT_MAX: '100' }

/** Sign-in and an order, each with the cookie and from `origin`, asked with `headers` as a proxy forwards them. */
async function signInAndOrder (app: FastifyInstance, origin: string, headers: Record<string, string> = {}) {
  const signIn = await app.inject({ method: 'POST', url: '/auth/session', headers: { 'sec-fetch-site': 'same-origin', ...headers, origin }, payload: JANE })
  const { cookie } = await startSession(app)
  const order = await app.inject({ method: 'POST', url: '/api/orders', headers: { 'sec-fetch-site': 'same-origin', ...headers, ...cookie, ...CSRF, origin }, payload: ORDER })
  return { signIn: signIn.statusCode, order: order.statusCode, code: order.json().code as string | undefined }
}

t.test('PUBLIC_ORIGIN: a proxy that rewrites Host and forwards nothing still lets the browser sign in and order; a foreign Origin is refused 403', async (t) => {
  const app = await buildTestApp(t, { ...SIGN_INS, PUBLIC_ORIGIN: `https://staging.example.com, ${PORTAL}/` })
  t.same(app.config.publicOrigins, ['https://staging.example.com', PORTAL])
  t.same(await signInAndOrder(app, PORTAL, { host: UPSTREAM_HOST }), { signIn: 200, order: 201, code: undefined }, 'from PUBLIC_ORIGIN')
  t.same(await signInAndOrder(app, 'https://staging.example.com', { host: UPSTREAM_HOST }), { signIn: 200, order: 201, code: undefined }, 'from the other origin of the list')
  t.same(await signInAndOrder(app, FOREIGN, { host: UPSTREAM_HOST }), { signIn: 403, order: 403, code: 'CSRF_REJECTED' }, 'from a foreign origin')
  t.same(await signInAndOrder(app, 'http://portal.example.com', { host: UPSTREAM_HOST }), { signIn: 403, order: 403, code: 'CSRF_REJECTED' }, 'the public host over another scheme is another origin')
  t.same(await signInAndOrder(app, `http://${UPSTREAM_HOST}`, { host: UPSTREAM_HOST }), { signIn: 200, order: 201, code: undefined }, 'the request\'s own origin still passes')
})

t.test('PUBLIC_ORIGIN unset: the same browser behind the same proxy is refused, as the service compares with http://<upstream>', async (t) => {
  const app = await buildTestApp(t)
  t.same(app.config.publicOrigins, [])
  t.same(await signInAndOrder(app, PORTAL, { host: UPSTREAM_HOST }), { signIn: 403, order: 403, code: 'CSRF_REJECTED' })
})

t.test('PUBLIC_ORIGIN unset, TRUST_PROXY set: the own origin honours X-Forwarded-Proto with the Host kept, or X-Forwarded-Host', async (t) => {
  const app = await buildTestApp(t, { ...SIGN_INS, TRUST_PROXY: '127.0.0.1' })
  const keptHost = { host: 'portal.example.com', 'x-forwarded-proto': 'https' }
  const forwardedHost = { host: UPSTREAM_HOST, 'x-forwarded-host': 'portal.example.com', 'x-forwarded-proto': 'https' }
  t.same(await signInAndOrder(app, PORTAL, keptHost), { signIn: 200, order: 201, code: undefined }, 'Host kept, scheme forwarded')
  t.same(await signInAndOrder(app, PORTAL, forwardedHost), { signIn: 200, order: 201, code: undefined }, 'host and scheme forwarded')
  t.same(await signInAndOrder(app, FOREIGN, forwardedHost), { signIn: 403, order: 403, code: 'CSRF_REJECTED' }, 'a foreign Origin still refused')
  t.same(await signInAndOrder(app, PORTAL, { host: 'portal.example.com' }), { signIn: 403, order: 403, code: 'CSRF_REJECTED' }, 'no X-Forwarded-Proto: the service sees http')

  const untrusting = await buildTestApp(t)
  t.same(await signInAndOrder(untrusting, PORTAL, forwardedHost), { signIn: 403, order: 403, code: 'CSRF_REJECTED' }, 'without TRUST_PROXY the forwarded headers are not believed')
})

t.test('CORS_ORIGIN, a list: each origin gets credentialed CORS and a cached preflight, and passes the Origin check; no other does', async (t) => {
  const portals = ['https://portal.example.com', 'https://staging-portal.example.com']
  const app = await buildTestApp(t, { ...SIGN_INS, CORS_ORIGIN: portals.join(',') })
  t.same(app.config.corsOrigins, portals)
  for (const origin of portals) {
    const preflight = await app.inject({ method: 'OPTIONS', url: '/api/orders', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,x-csrf' } })
    t.equal(preflight.statusCode, 204)
    t.equal(preflight.headers['access-control-allow-origin'], origin, `${origin}: allowed`)
    t.equal(preflight.headers['access-control-allow-credentials'], 'true')
    t.equal(preflight.headers['access-control-max-age'], '7200')
    const missing = await app.inject({ method: 'GET', url: '/api/nothing-here', headers: { origin } })
    t.equal(missing.headers['access-control-allow-origin'], origin, `${origin}: a 404 is readable`)
    t.same(await signInAndOrder(app, origin, { 'sec-fetch-site': 'same-site' }), { signIn: 200, order: 201, code: undefined }, `${origin}: signs in and orders`)
  }
  const foreign = await app.inject({ method: 'OPTIONS', url: '/api/orders', headers: { origin: FOREIGN, 'access-control-request-method': 'POST' } })
  t.equal(foreign.headers['access-control-allow-origin'], undefined, 'a foreign origin gets no CORS')
  t.equal((await app.inject({ method: 'GET', url: '/api/nothing-here', headers: { origin: FOREIGN } })).headers['access-control-allow-origin'], undefined, 'nor on a 404')
  t.same(await signInAndOrder(app, FOREIGN), { signIn: 403, order: 403, code: 'CSRF_REJECTED' })
})

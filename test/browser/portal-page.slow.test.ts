import t from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import type { BrowserContext, Page } from 'playwright-core'
import portalPage from '../../dev/portal/index.js'
import type { Sandbox } from '../../dev/sandbox/index.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'
import { buildTestApp, scopeWith, startTestSandbox } from '../helpers/app.js'
import { skipWithout } from '../helpers/packages.js'
import { portalBrowser, signInOnPage } from '../helpers/portal-browser.js'
import { waitFor } from '../helpers/processes.js'
import { JANE as JANE_SIGN_IN } from '../helpers/sessions.js'

// The reference portal page (dev/portal/) in real Chromium, against the real service: a cookie
// session that no script can read, and a native EventSource.

const skip = skipWithout(['chromium'])
// Three base64url parts, the first a JSON object: a JWT, whatever it carries.
const JWT = /eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]*/
const JANE = { ...JANE_SIGN_IN, clientId: '1', invoices: 5 }
const WAIT_MS = 15_000

interface Teardown { teardown (fn: () => unknown): void }

/** A web server of the test's own on 127.0.0.1, named by `host` (localhost is another site than 127.0.0.1). */
async function webServer (t: Teardown, host: 'localhost' | '127.0.0.1', routes: (server: FastifyInstance) => Promise<void>): Promise<string> {
  const server = Fastify()
  await server.register(routes)
  await server.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => server.close())
  return `http://${host}:${(server.server.address() as AddressInfo).port}`
}

/** The service with the page, the platform events on (the sandbox CRM provisions), listening on http://localhost. */
async function portalService (t: Teardown, corsOrigin?: string): Promise<{ app: FastifyInstance, sandbox: Sandbox, origin: string }> {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true', ...(corsOrigin === undefined ? {} : { CORS_ORIGIN: corsOrigin }) }, sandbox, { pages: portalPage })
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, sandbox, origin: `http://localhost:${(app.server.address() as AddressInfo).port}` }
}

/**
 * What a tab received: every response body, every message of its SSE streams (read through the
 * DevTools protocol: an open stream has no body to read), and every script error.
 */
interface Received { bodies: Array<Promise<string>>, streamMessages: string[], streamRequests: string[], problems: string[] }

async function watch (context: BrowserContext, page: Page): Promise<Received> {
  const received: Received = { bodies: [], streamMessages: [], streamRequests: [], problems: [] }
  page.on('response', (response) => {
    if (response.headers()['content-type']?.startsWith('text/event-stream') === true) return
    received.bodies.push(response.text().catch(() => ''))
  })
  page.on('request', (request) => {
    if (new URL(request.url()).pathname === '/api/events') received.streamRequests.push(request.resourceType())
  })
  // The browser reports each refused call as a console error: the page handles a 401 (on load), and
  // the test asks for a 403. A CORS refusal or a content security policy violation reads otherwise.
  page.on('console', (message) => {
    if (message.type() === 'error' && !/^Failed to load resource: the server responded with a status of 40[13]\b/.test(message.text())) received.problems.push(message.text())
  })
  page.on('pageerror', (error) => received.problems.push(error.message))
  const devtools = await context.newCDPSession(page)
  devtools.on('Network.eventSourceMessageReceived', ({ data }) => received.streamMessages.push(data))
  await devtools.send('Network.enable')
  return received
}

function signIn (page: Page, user = JANE): Promise<void> {
  return signInOnPage(page, user, WAIT_MS)
}

async function ordersOf (app: FastifyInstance, clientId = 1): Promise<number> {
  return (await app.orders.store.listForClient(clientId, 100, 0)).total
}

/** What a `fetch` of the page gets for an order placed with the cookie, and with or without the CSRF header. */
function fetchOrder (page: Page, api: string, headers: Record<string, string>) {
  return page.evaluate(async ({ api, headers }) => {
    const response = await fetch(`${api}/api/orders`, {
      method: 'POST',
      credentials: 'include',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ productId: 1, billingCycle: 'monthly' })
    })
    const body = await response.json() as { code?: string }
    return { status: response.status, code: body.code }
  }, { api, headers })
}

t.test('the page is static HTML, CSS and JS under /portal/ with the service\'s page headers; nothing else of its folder; only where asked for', async (t) => {
  const app = await buildTestApp(t, {}, undefined, { pages: portalPage })
  const page = await app.inject('/portal/')
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-type'], /^text\/html/)
  t.match(page.headers['content-security-policy'], /script-src 'self'/, 'Helmet\'s default policy: no inline script')
  t.equal(page.headers['cache-control'], 'no-cache', 'asked for again, so an edit shows on reload')
  const scripts = [...page.body.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)]
  t.ok(scripts.length > 0 && scripts.every(([, attributes, body]) => /\bsrc="/.test(attributes ?? '') && body?.trim() === ''), 'every script is a file')
  t.notMatch(page.body, /\son[a-z]+=|\sstyle=/i, 'no inline event handler or style')
  const script = await app.inject('/portal/portal.js')
  t.match(script.headers['content-type'], /^(text|application)\/javascript/)
  t.notMatch(script.body, /localStorage|sessionStorage|document\.cookie|authorization/i, 'keeps nothing in the browser\'s storage, and sends no token')
  t.match((await app.inject('/portal/portal.css')).headers['content-type'], /^text\/css/)
  const bare = await app.inject('/portal?api=http%3A%2F%2Flocalhost%3A3000')
  t.equal(bare.statusCode, 302)
  t.equal(bare.headers.location, '/portal/?api=http%3A%2F%2Flocalhost%3A3000', 'to the folder, the query kept')
  t.equal((await app.inject('/portal/index.ts')).statusCode, 404, 'the plugin\'s source is not served')
  t.notMatch((await app.inject('/docs/json')).body, /\/portal/, 'nor listed in the API document')

  const product = await buildTestApp(t)
  t.equal((await product.inject('/portal/')).statusCode, 404, 'the service built without it serves no page')
})

for (const way of ['same-origin', 'cross-origin'] as const) {
  const served = way === 'same-origin' ? 'served by the service itself' : 'served from another origin, with CORS_ORIGIN'
  t.test(`the reference page, ${served}: sign in, invoices, an order live to Active, a reload, no token in reach, logout ends the stream`, { skip }, async (t) => {
    const pageOrigin = way === 'cross-origin' ? await webServer(t, 'localhost', async (server) => { await server.register(portalPage) }) : undefined
    const { app, sandbox, origin: service } = await portalService(t, pageOrigin)
    const url = pageOrigin === undefined ? `${service}/portal/` : `${pageOrigin}/portal/?api=${encodeURIComponent(service)}`
    const api = pageOrigin === undefined ? '' : service
    const context = await portalBrowser(t)
    const page = await context.newPage()
    const received = await watch(context, page)

    await page.goto(url)
    await signIn(page)
    t.equal(await page.textContent('#session [data-field=clientId]'), JANE.clientId, 'who is signed in')
    t.ok(Date.parse(await page.getAttribute('#session [data-field=expiresAt]', 'datetime') ?? '') > Date.now(), 'and when the session ends')
    t.ok(Date.parse(await page.getAttribute('#session [data-field=idleExpiresAt]', 'datetime') ?? '') > Date.now(), 'and when it ends unused')
    await page.waitForSelector('#invoices[data-loaded=true]', { timeout: WAIT_MS })
    t.equal(await page.locator('#invoices tbody tr').count(), JANE.invoices, 'the invoices are listed')

    await page.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })
    await waitFor('the platform-event subscription', async () => app.platformEvents.subscription.stats().state === 'connected')
    t.equal(await page.locator('#orders tbody tr').count(), 0, 'no order yet')
    const [placing] = await Promise.all([
      page.waitForRequest((request) => request.method() === 'POST' && new URL(request.url()).pathname === '/api/orders'),
      page.click('#place-order')
    ])
    t.match(placing.headers()['idempotency-key'], /^[0-9a-f-]{36}$/, 'with an Idempotency-Key, so that a retry never places a second order')
    const placed = page.locator('#orders tbody tr[data-crm-order-id]').first()
    await placed.waitFor({ timeout: WAIT_MS })
    const crmOrderId = await placed.getAttribute('data-crm-order-id')
    t.ok(crmOrderId, 'the order is placed, Pending Review in the CRM')
    sandbox.crm.publishOrderProvisionRequested(crmOrderId!)
    await page.waitForSelector('#orders tr[data-status=Active]', { timeout: WAIT_MS })
    t.same(await placed.locator('.history li').evaluateAll((items) => items.map((item) => item.getAttribute('data-status'))),
      ['Pending Review', 'Provisioning', 'Active'], 'each order.status event is shown as it comes')
    t.ok(received.streamRequests.length > 0 && received.streamRequests.every((type) => type === 'eventsource'), 'through the browser\'s own EventSource')
    // The DevTools protocol reports a stream's messages a moment after the page has them.
    await waitFor('Active among the stream\'s messages', async () => received.streamMessages.some((data) => data.includes('"status":"Active"')))
    t.pass('the stream carried Active')

    const refused = await fetchOrder(page, api, {})
    t.same(refused, { status: 403, code: 'CSRF_REJECTED' }, 'a fetch with the cookie and without x-csrf is refused, and the page can read why')
    t.equal(await ordersOf(app), 1, 'and places no order')

    await page.reload()
    await page.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
    t.equal(await page.textContent('#session [data-field=clientId]'), JANE.clientId, 'a reload keeps the user signed in')
    await page.waitForSelector('#orders tr[data-status=Active]', { timeout: WAIT_MS })
    await page.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })

    const cookies = await context.cookies()
    const session = cookies.find((cookie) => cookie.name === SESSION_COOKIE)
    t.match(session, { httpOnly: true, secure: true, sameSite: 'Strict', path: '/', domain: 'localhost' }, 'the session is an HttpOnly, Secure, SameSite=Strict __Host- cookie')
    t.notMatch(session?.value, JWT, 'an opaque value, not a JWT')
    t.same(cookies.map((cookie) => cookie.name), [SESSION_COOKIE], 'the only cookie')
    t.same(await page.evaluate('({ cookie: document.cookie, local: localStorage.length, session: sessionStorage.length })'),
      { cookie: '', local: 0, session: 0 }, 'document.cookie, localStorage and sessionStorage hold nothing')
    const bodies = await Promise.all(received.bodies)
    t.ok(bodies.some((body) => body.includes('"invoices"')), `${bodies.length} response bodies read, the API's among them`)
    t.same(bodies.filter((body) => body.includes(session!.value) || JWT.test(body)), [], 'no response body holds the session or a token')
    t.same(received.streamMessages.filter((data) => data.includes(session!.value) || JWT.test(data)), [], 'nor any event of the stream')

    // Logging out in one tab ends the other tab's stream: it shows the session's end.
    const other = await context.newPage()
    const otherReceived = await watch(context, other)
    await other.goto(url)
    await other.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })
    await page.click('#sign-out')
    await page.waitForSelector('body[data-state=signed-out] #message[data-reason=signed-out]', { timeout: WAIT_MS })
    await other.waitForSelector('body[data-state=signed-out] #message[data-reason=session-ended]', { timeout: WAIT_MS })
    t.match(await other.textContent('#message'), /sign-out/, 'the other tab says why')
    await waitFor('the end among the stream\'s messages', async () => otherReceived.streamMessages.some((data) => data.includes('"reason":"logged_out"')))
    t.pass('its stream said so (session.ended)')
    await waitFor('no stream left open', async () => scopeWith(app, 'sseStreams').sseStreams.counts().open === 0)
    t.equal(await other.locator('#orders tbody tr').count(), 0, 'nothing of the session is left on the page')
    t.same((await context.cookies()).filter((cookie) => cookie.name === SESSION_COOKIE), [], 'the cookie is cleared')
    await other.reload()
    await other.waitForSelector('body[data-state=signed-out]', { timeout: WAIT_MS })
    t.pass('a reload stays signed out')

    t.same([...received.problems, ...otherReceived.problems], [], 'no script error and no content security policy violation')
  })
}

t.test('sign out everywhere: a tab learns it from its stream, a tab without one from its next call\'s 401 or its stream\'s refused reconnection; a wrong password is refused with its message', { skip }, async (t) => {
  const { origin } = await portalService(t)
  const context = await portalBrowser(t)
  const page = await context.newPage()
  await page.goto(`${origin}/portal/`)
  await page.waitForSelector('body[data-state=signed-out]', { timeout: WAIT_MS })
  await page.fill('#sign-in [name=email]', JANE.email)
  await page.fill('#sign-in [name=password]', 'wrong')
  await page.click('#sign-in button[type=submit]')
  await page.waitForSelector('#message[data-reason=sign-in-refused]', { timeout: WAIT_MS })
  t.equal(await page.getAttribute('body', 'data-state'), 'signed-out', 'still signed out, told why')
  t.equal(await page.inputValue('#sign-in [name=password]'), '', 'the password is not kept in the form')

  await signIn(page)
  const other = await context.newPage()
  await other.goto(`${origin}/portal/`)
  await other.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })
  const streamless = await context.newPage()
  await streamless.route('**/api/events', (route) => route.abort())
  await streamless.goto(`${origin}/portal/`)
  await streamless.waitForSelector('body[data-state=signed-in] #invoices[data-loaded=true]', { timeout: WAIT_MS })
  // Its stream cannot get through (a network down): EventSource keeps trying.
  const reconnecting = await context.newPage()
  await reconnecting.route('**/api/events', (route) => route.abort())
  await reconnecting.goto(`${origin}/portal/`)
  await reconnecting.waitForSelector('body[data-state=signed-in] #stream[data-stream=connecting]', { timeout: WAIT_MS })

  await page.click('#sign-out-everywhere')
  await page.waitForSelector('body[data-state=signed-out] #message[data-reason=signed-out-everywhere]', { timeout: WAIT_MS })
  await other.waitForSelector('body[data-state=signed-out] #message[data-reason=session-ended]', { timeout: WAIT_MS })
  t.pass('the tab with a stream shows the session\'s end')
  t.equal(await streamless.getAttribute('body', 'data-state'), 'signed-in', 'the tab without one does not know yet')
  await streamless.click('#place-order')
  await streamless.waitForSelector('body[data-state=signed-out] #message[data-reason=session-ended]', { timeout: WAIT_MS })
  t.pass('its next call answers 401, and it shows the session\'s end')
  t.equal(await reconnecting.getAttribute('body', 'data-state'), 'signed-in', 'nor does the tab whose stream is away')
  const [refusal] = await Promise.all([
    reconnecting.waitForResponse((response) => new URL(response.url()).pathname === '/api/events', { timeout: WAIT_MS }),
    reconnecting.unroute('**/api/events')
  ])
  t.equal(refusal.status(), 401, 'the reconnection is refused')
  await reconnecting.waitForSelector('body[data-state=signed-out] #message[data-reason=session-ended]', { timeout: WAIT_MS })
  t.pass('its EventSource stops; the page asks the session, and shows its end')
})

t.test('an order whose placement failed is retried with its Idempotency-Key; the next order gets a new one', { skip }, async (t) => {
  const { app, sandbox, origin } = await portalService(t)
  const context = await portalBrowser(t)
  const page = await context.newPage()
  const keys: Array<string | undefined> = []
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === '/api/orders') keys.push(request.headers()['idempotency-key'])
  })
  await page.goto(`${origin}/portal/`)
  await signIn(page)
  sandbox.billing.injectFault({ kind: 'http5xx', route: 'AddOrder', status: 502, times: 1 })
  await page.click('#place-order')
  await page.waitForSelector('#message[data-reason=error]', { timeout: WAIT_MS })
  t.match(await page.textContent('#message'), /Billing service is temporarily unavailable/, 'the failure is shown')
  t.equal(await page.textContent('#place-order'), 'Retry the order', 'and offered again')
  await page.click('#place-order')
  await page.waitForSelector('#orders tbody tr[data-status="Pending Review"]', { timeout: WAIT_MS })
  // The order's row may come on the event stream before the placement's answer: the button is offered
  // anew (and its key forgotten) once the answer is in.
  await page.locator('#place-order', { hasText: /^Order product 1, monthly$/ }).waitFor({ timeout: WAIT_MS })
  t.pass('offered anew for the next order')
  await page.click('#place-order')
  await waitFor('the second order', async () => await page.locator('#orders tbody tr[data-status="Pending Review"]').count() === 2)
  t.equal(keys.length, 3)
  t.ok(keys[0] !== undefined && keys[0] === keys[1], 'the retry sent the failed placement\'s key')
  t.not(keys[2], keys[1], 'a new order, a new key')
  t.equal(sandbox.billing.orders.filter((order) => order.status === 'Pending').length, 2, 'two orders in billing, one a key')
  t.equal(await ordersOf(app), 2, 'one portal order a key: the retry completed the failed placement\'s own')
})

t.test('CSRF: a form on another site, or on another origin of the same site, places no order with the live session', { skip }, async (t) => {
  const portalOrigin = await webServer(t, 'localhost', async (server) => { await server.register(portalPage) })
  const { app, sandbox, origin: service } = await portalService(t, portalOrigin)
  // An auto-submitting form, posting what a JSON API would take if it read a text/plain body.
  const attack = async (server: FastifyInstance) => {
    server.get('/win-a-prize', async (_request, reply) => reply.type('text/html').send(`<!doctype html>
      <form method="post" action="${service}/api/orders" enctype="text/plain">
        <input name='{"productId":1,"billingCycle":"monthly","x":"' value='"}'>
      </form>
      <script>document.forms[0].submit()</script>`))
  }
  const otherSite = await webServer(t, '127.0.0.1', attack)
  const sameSite = await webServer(t, 'localhost', attack)
  const context = await portalBrowser(t)
  const page = await context.newPage()
  await page.goto(`${portalOrigin}/portal/?api=${encodeURIComponent(service)}`)
  await signIn(page)
  const billingOrders = sandbox.billing.orders.length

  for (const [name, origin, expected] of [['another site', otherSite, [401, 403]], ['another origin of the same site', sameSite, [403]]] as const) {
    const tab = await context.newPage()
    const [answer] = await Promise.all([tab.waitForResponse((response) => response.url().endsWith('/api/orders')), tab.goto(`${origin}/win-a-prize`)])
    t.ok((expected as readonly number[]).includes(answer.status()), `from ${name}: the form's POST is refused (${answer.status()})`)
    if (answer.status() === 403) t.match(await answer.json(), { code: 'CSRF_REJECTED' }, 'refused as a forged request')
    await tab.close()
  }
  t.equal(await ordersOf(app), 0, 'no order in the service')
  t.equal(sandbox.billing.orders.length, billingOrders, 'and none in billing')

  t.same(await fetchOrder(page, service, {}), { status: 403, code: 'CSRF_REJECTED' }, 'the portal\'s own fetch without x-csrf is refused')
  t.same(await fetchOrder(page, service, { 'x-csrf': '1' }), { status: 201, code: undefined }, 'with it, the same session places the order')
  t.equal(await ordersOf(app), 1, 'one order, the portal\'s own')
})

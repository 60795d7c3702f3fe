import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { BrowserContext, Page } from 'playwright-core'
import portalPage from '../../dev/portal/index.js'
import { SANDBOX_TOTP_SECRET, startSandboxIdentityProvider, totpCode, type SandboxIdentityProvider } from '../../dev/sandbox/identity.js'
import type { Sandbox } from '../../dev/sandbox/index.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'
import { buildTestApp, scopeWith, startTestSandbox } from '../helpers/app.js'
import { skipWithout } from '../helpers/packages.js'
import { freePort } from '../helpers/ports.js'
import { portalBrowser, signInOnPage } from '../helpers/portal-browser.js'
import { PrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'

// The reference page in real Chromium, signing in at the sandbox's identity provider as `npm start`
// shows it: the provider's own pages, a TOTP step, its end-session page.

const skip = skipWithout(['chromium'])
const WAIT_MS = 15_000
const JWT = /eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]*/

interface Portal { app: FastifyInstance, sandbox: Sandbox, provider: SandboxIdentityProvider, origin: string, accessTokens: string[] }

/** The service with the page on http://localhost:<port>, pointed at the sandbox's provider, which knows it at that origin. */
async function portalWithProvider (t: Test, overrides: Record<string, string> = {}): Promise<Portal> {
  const port = await freePort()
  const origin = `http://localhost:${port}`
  const provider = await startSandboxIdentityProvider({ portalOrigins: [`http://127.0.0.1:${port}`, origin] })
  t.teardown(() => provider.close())
  // Opaque access tokens: the value is the token's id.
  const accessTokens: string[] = []
  provider.provider.on('access_token.saved', (token) => accessTokens.push(token.jti))
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true', ...provider.settings, ...overrides }, sandbox, { pages: portalPage })
  await app.listen({ host: '127.0.0.1', port })
  return { app, sandbox, provider, origin, accessTokens }
}

/** Every response body a page received, the provider's pages among them. */
function bodiesOf (page: Page): Array<Promise<string>> {
  const bodies: Array<Promise<string>> = []
  page.on('response', (response) => {
    if (response.headers()['content-type']?.startsWith('text/event-stream') === true) return
    if (response.status() >= 300 && response.status() < 400) return
    bodies.push(response.text().catch(() => ''))
  })
  return bodies
}

/** At the provider: its sign-in form, then its TOTP step when `code` is given, then its consent page if it asks. */
async function signInAtProvider (page: Page, portal: Portal, login: string, password: string, code?: () => string): Promise<void> {
  await page.waitForSelector('body[data-state=signed-out] #sign-in-oidc:not([hidden])', { timeout: WAIT_MS })
  await page.click('#sign-in-oidc-link')
  await page.waitForURL((url) => url.origin === portal.provider.issuer, { timeout: WAIT_MS })
  await page.fill('[name=login]', login)
  await page.fill('[name=password]', password)
  await page.click('button[type=submit]')
  if (code !== undefined) {
    await page.waitForSelector('[name=code]', { timeout: WAIT_MS })
    await page.fill('[name=code]', code())
    await page.click('button[type=submit]')
  }
  const consent = await Promise.race([
    page.waitForSelector('text=Authorize access', { timeout: WAIT_MS }).then(() => true),
    page.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS }).then(() => false)
  ])
  if (consent) await page.click('button[type=submit]')
  await page.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
}

/** What the page's own script can reach: every global's value it can read, the document, the storages. */
function pageGlobals (page: Page): Promise<string> {
  // A string, evaluated in the page: these tests' types know no DOM.
  return page.evaluate(`(() => {
    const values = Object.getOwnPropertyNames(window).map((name) => {
      try {
        const value = window[name]
        if (typeof value === 'string') return value
        if (typeof value === 'object' && value !== null && !(value instanceof Node) && value !== window) return JSON.stringify(value) ?? ''
      } catch {}
      return ''
    })
    return [...values, document.documentElement.outerHTML, document.cookie, JSON.stringify({ ...localStorage }), JSON.stringify({ ...sessionStorage })].join('\\n')
  })()`)
}

async function idTokenOf (app: FastifyInstance, context: BrowserContext): Promise<string> {
  const cookie = (await context.cookies()).find(({ name }) => name === SESSION_COOKIE)!
  const session = await scopeWith(app, 'sessions').sessions.read(cookie.value)
  return scopeWith(app, 'oidcSignIn').oidcSignIn!.options.sealer.unseal(session!.identity.sealedIdToken!)!
}

t.test('sign in at the sandbox provider from the reference page: invoices, an order live, a reload, no provider token in reach, sign-out at its end-session page', { skip }, async (t) => {
  const portal = await portalWithProvider(t)
  const { app, sandbox, origin } = portal
  const context = await portalBrowser(t)
  const page = await context.newPage()
  const bodies = bodiesOf(page)
  await page.goto(`${origin}/portal/`)
  await page.waitForSelector('body[data-state=signed-out]', { timeout: WAIT_MS })
  t.ok(await page.isHidden('#sign-in'), 'PASSWORD_SIGN_IN is off with a provider: no password form')
  await signInAtProvider(page, portal, 'jane@example.com', 'correct-horse')
  t.equal(new URL(page.url()).pathname, '/portal/', 'back on the page')
  t.equal(await page.textContent('#session [data-field=email]'), 'jane@example.com')
  t.match(await page.textContent('#session [data-field=signIn]'), /identity provider/)

  await page.waitForSelector('#invoices[data-loaded=true]', { timeout: WAIT_MS })
  t.equal(await page.locator('#invoices tbody tr').count(), 5, 'her invoices')
  await page.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })
  await waitFor('the platform-event subscription', async () => app.platformEvents.subscription.stats().state === 'connected')
  await page.click('#place-order')
  const placed = page.locator('#orders tbody tr[data-crm-order-id]').first()
  await placed.waitFor({ timeout: WAIT_MS })
  sandbox.crm.publishOrderProvisionRequested((await placed.getAttribute('data-crm-order-id'))!)
  await page.waitForSelector('#orders tr[data-status=Active]', { timeout: WAIT_MS })
  t.same(await placed.locator('.history li').evaluateAll((items) => items.map((item) => item.getAttribute('data-status'))), ['Pending Review', 'Provisioning', 'Active'], 'followed live')

  await page.reload()
  await page.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
  t.equal(await page.textContent('#session [data-field=clientId]'), '1', 'a reload keeps her signed in')

  const idToken = await idTokenOf(app, context)
  t.match(idToken, JWT, 'the service holds her ID token (sealed)')
  t.ok(portal.accessTokens.length > 0, 'the provider issued an access token')
  const secrets = [idToken, ...portal.accessTokens]
  const holds = (text: string) => secrets.some((secret) => text.includes(secret))
  const cookies = (await context.cookies()).filter(({ name }) => name !== SESSION_COOKIE)
  t.same(cookies.filter(({ value }) => holds(value) || JWT.test(value)).map(({ name }) => name), [], `none of the ${cookies.length} other cookies (the provider's own among them) holds a provider token`)
  t.notOk(holds(await pageGlobals(page)), 'no page global, the document or its storage holds one')

  // Sign out: here, then at the provider's end-session page, which sends the browser back.
  await page.click('#sign-out')
  await page.waitForURL((url) => url.origin === portal.provider.issuer, { timeout: WAIT_MS })
  t.match(await page.textContent('body'), /Sign out of the billing system\?/, 'the provider asks to confirm')
  await page.click('#sign-out')
  await page.waitForURL(`${origin}/`, { timeout: WAIT_MS })
  t.pass('back at the service')
  const texts = await Promise.all(bodies)
  t.ok(texts.length > 10, `${texts.length} response bodies read`)
  t.same(texts.filter((text) => holds(text) || JWT.test(text)), [], 'no response body holds a provider token')

  await page.goto(`${origin}/portal/`)
  await page.waitForSelector('body[data-state=signed-out]', { timeout: WAIT_MS })
  await page.click('#sign-in-oidc-link')
  await page.waitForSelector('[name=password]', { timeout: WAIT_MS })
  t.pass('signed out at the provider too: its form again')
})

t.test('a two-factor user signs in at the provider with the TOTP code of their authenticator', { skip }, async (t) => {
  const portal = await portalWithProvider(t)
  const context = await portalBrowser(t)
  const page = await context.newPage()
  await page.goto(`${portal.origin}/portal/`)
  await signInAtProvider(page, portal, 'tom@example.com', 'second-factor', () => totpCode(SANDBOX_TOTP_SECRET))
  t.equal(await page.textContent('#session [data-field=clientId]'), '4', 'Tom, whom password sign-in refuses (TWO_FACTOR_REQUIRED), is signed in')
  t.equal(await page.textContent('#session [data-field=email]'), 'tom@example.com')
})

t.test('a person acting for two clients picks one on the page', { skip }, async (t) => {
  const portal = await portalWithProvider(t)
  const context = await portalBrowser(t)
  const page = await context.newPage()
  await page.goto(`${portal.origin}/portal/`)
  await page.click('#sign-in-oidc-link')
  await page.fill('[name=login]', 'john@example.com')
  await page.fill('[name=password]', 'battery-staple')
  await page.click('button[type=submit]')
  await page.waitForSelector('text=Authorize access', { timeout: WAIT_MS })
  await page.click('button[type=submit]')
  await page.waitForSelector('#choose-client:not([hidden]) button[data-client-id="3"]', { timeout: WAIT_MS })
  t.same(await page.locator('#client-choices button').evaluateAll((buttons) => buttons.map((button) => button.getAttribute('data-client-id'))), ['2', '3'])
  t.notMatch(page.url(), /chooseClient/, 'the address is tidied')
  await page.click('button[data-client-id="3"]')
  await page.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
  t.equal(await page.textContent('#session [data-field=clientId]'), '3', 'the session acts for the client picked')
})

t.test('the page says why live updates are off when the stream cap refuses a tab, and clears its banner when authentication recovers', { skip }, async (t) => {
  const redis = await PrivateRedis.start({ persistent: true })
  t.teardown(() => redis.kill())
  const portal = await portalWithProvider(t, { REDIS_URL: redis.url, SSE_MAX_STREAMS_PER_USER: '1', PASSWORD_SIGN_IN: 'true' })
  const context = await portalBrowser(t)
  const first = await context.newPage()
  await first.goto(`${portal.origin}/portal/`)
  await first.waitForSelector('body[data-state=signed-out]', { timeout: WAIT_MS })
  t.ok(await first.isVisible('#sign-in-oidc'), 'both ways offered when PASSWORD_SIGN_IN is on')
  await signInOnPage(first, undefined, WAIT_MS)
  await first.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })
  const second = await context.newPage()
  await second.goto(`${portal.origin}/portal/`)
  await second.waitForSelector('#stream-reason[data-code=TOO_MANY_STREAMS]', { timeout: WAIT_MS })
  t.match(await second.textContent('#stream-reason'), /most SSE streams it may \(1\)/, 'the second tab says why: the cap per user')
  t.equal(await second.textContent('#stream'), 'live updates off')
  await first.close()
  await second.waitForSelector('#stream[data-stream=open]', { timeout: 60_000 })
  t.ok(await second.isHidden('#stream-reason'), 'once a stream is free, it opens and the reason goes')

  await redis.stop()
  await second.reload()
  await second.waitForSelector('#message[data-reason=unavailable]', { timeout: WAIT_MS })
  t.match(await second.textContent('#message'), /Authentication is temporarily unavailable/)
  await redis.start()
  await second.waitForSelector('#message', { state: 'hidden', timeout: WAIT_MS })
  await second.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
  t.pass('the banner clears once the service answers again, and the page goes on signed in')
})

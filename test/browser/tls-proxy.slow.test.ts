import t from 'tap'
import { readFileSync } from 'node:fs'
import type { Page } from 'playwright-core'
import { request, type Dispatcher } from 'undici'
import { ensureTestDatabase, startTestSandbox, testEnv, testSchemaUrl } from '../helpers/app.js'
import { HAPROXY_CONFIG, haproxyPorts, haproxySettings, renderHaproxyConfig, startHaproxy } from '../helpers/haproxy.js'
import { skipWithout } from '../helpers/packages.js'
import { portalBrowser, signInOnPage } from '../helpers/portal-browser.js'
import { freePort } from '../helpers/ports.js'
import { waitFor } from '../helpers/processes.js'
import { startService } from '../helpers/service-process.js'
import { JANE } from '../helpers/sessions.js'
import { selfSignedCertificate } from '../helpers/tls.js'

// TLS at the edge (CONTRACT §11): the shipped HAProxy configuration ends TLS in front of the
// service, run as a process, and real Chromium uses the reference page at https://localhost:<port>.
// Then a proxy that rewrites Host to the upstream's address and forwards nothing, as nginx does by
// default: PUBLIC_ORIGIN is what lets the browser in there.

const skip = skipWithout(['haproxy', 'openssl', 'chromium'])
const WAIT_MS = 20_000
const INVOICES = 5
const FOREIGN = 'https://evil.example.net'

async function signIn (page: Page): Promise<void> {
  await signInOnPage(page, JANE, WAIT_MS)
  await page.waitForSelector('#invoices[data-loaded=true]', { timeout: WAIT_MS })
}

/** A cookie sign-in as a browser page at `origin` makes it, through a proxy at `url`. */
async function signInFrom (url: string, origin: string, dispatcher: Dispatcher): Promise<{ status: number, code: string | undefined }> {
  const response = await request(`${url}/auth/session`, {
    dispatcher,
    method: 'POST',
    headers: { 'content-type': 'application/json', origin },
    body: JSON.stringify(JANE)
  })
  const body = await response.body.json() as { code?: string }
  return { status: response.statusCode, code: body.code }
}

/**
 * A second listener beside the shipped one, as nginx's `proxy_pass` is by default: TLS, Host
 * rewritten to the upstream's address, no X-Forwarded-Host and no X-Forwarded-Proto.
 */
function hostRewritingProxy (certificate: string, port: number, servicePort: number): string {
  return [
    'frontend host_rewriting',
    `    bind 127.0.0.1:${port} ssl crt ${certificate}`,
    '    default_backend host_rewriting',
    'backend host_rewriting',
    `    http-request set-header Host 127.0.0.1:${servicePort}`,
    `    server service 127.0.0.1:${servicePort}`
  ].join('\n')
}

t.test('TLS at the edge: Chromium through the shipped HAProxy signs in, orders, follows the order live and stays signed in; through a Host-rewriting proxy PUBLIC_ORIGIN lets it in; a foreign Origin gets 403', { skip }, async (t) => {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const certificate = selfSignedCertificate()
  const [servicePort, rewritingPort, ports] = [await freePort(), await freePort(), await haproxyPorts()]
  const edge = `https://localhost:${ports.https}`
  const rewritingEdge = `https://localhost:${rewritingPort}`
  // The dev entry serves the reference page; its upstreams are this test's sandbox.
  const service = await startService(testEnv({
    ...sandbox.settings,
    DATABASE_URL: await testSchemaUrl(t),
    PORT: String(servicePort),
    CRM_EVENTS_ENABLED: 'true',
    // As haproxy.cfg's comments say: the balancer trusted, so its X-Forwarded-Proto and Host make the origin.
    TRUST_PROXY: '127.0.0.1',
    // The origin behind the proxy that forwards neither.
    PUBLIC_ORIGIN: rewritingEdge
  }))
  t.teardown(() => { if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill('SIGKILL') })

  const shipped = readFileSync(HAPROXY_CONFIG, 'utf8')
  const crt = haproxySettings(shipped).tlsCertificate!
  const haproxy = await startHaproxy(t, certificate, (listeners) => [
    renderHaproxyConfig(shipped, { ports: listeners, serverPorts: [servicePort], interMs: 500 }),
    hostRewritingProxy(crt, rewritingPort, servicePort)
  ].join('\n'), ports)

  const redirect = await request(`http://localhost:${ports.http}/portal/`, { dispatcher: haproxy.dispatcher })
  await redirect.body.dump()
  t.equal(redirect.statusCode, 301, 'plain HTTP is redirected')
  t.equal(redirect.headers.location, `https://localhost:${ports.http}/portal/`, 'to HTTPS')

  // Through the shipped configuration.
  const context = await portalBrowser(t, { ignoreHTTPSErrors: true })
  const page = await context.newPage()
  const streamRequests: string[] = []
  page.on('request', (sent) => { if (new URL(sent.url()).pathname === '/api/events') streamRequests.push(sent.resourceType()) })
  const loaded = await page.goto(`${edge}/portal/`)
  t.ok((await loaded?.securityDetails())?.protocol?.startsWith('TLS'), `the page came over ${(await loaded?.securityDetails())?.protocol}`)
  await signIn(page)
  t.equal(await page.textContent('#session [data-field=clientId]'), '1', 'signed in')
  t.equal(await page.locator('#invoices tbody tr').count(), INVOICES, 'the invoices are read')

  await page.waitForSelector('#stream[data-stream=open]', { timeout: WAIT_MS })
  await waitFor('the platform-event subscription', async () => {
    const queues = await request(`${service.url}/health/queues`)
    return ((await queues.body.json()) as { events?: { state?: string } }).events?.state === 'connected'
  }, WAIT_MS)
  await page.click('#place-order')
  const placed = page.locator('#orders tbody tr[data-crm-order-id]').first()
  await placed.waitFor({ timeout: WAIT_MS })
  const crmOrderId = await placed.getAttribute('data-crm-order-id')
  t.ok(crmOrderId, 'an order is placed')
  sandbox.crm.publishOrderProvisionRequested(crmOrderId!)
  await page.waitForSelector('#orders tr[data-status=Active]', { timeout: WAIT_MS })
  t.same(await placed.locator('.history li').evaluateAll((items) => items.map((item) => item.getAttribute('data-status'))),
    ['Pending Review', 'Provisioning', 'Active'], 'followed live to Active')
  t.ok(streamRequests.length > 0 && streamRequests.every((type) => type === 'eventsource'), 'on the browser\'s own EventSource')

  await page.reload()
  await page.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
  t.equal(await page.textContent('#session [data-field=clientId]'), '1', 'a reload keeps the user signed in')
  await page.waitForSelector('#orders tr[data-status=Active]', { timeout: WAIT_MS })

  // Through the proxy that rewrites Host: the browser's origin is known only by PUBLIC_ORIGIN.
  const rewritten = await (await portalBrowser(t, { ignoreHTTPSErrors: true })).newPage()
  await rewritten.goto(`${rewritingEdge}/portal/`)
  await signIn(rewritten)
  t.equal(await rewritten.textContent('#session [data-field=clientId]'), '1', 'signed in behind the Host-rewriting proxy, with PUBLIC_ORIGIN')
  await rewritten.reload()
  await rewritten.waitForSelector('body[data-state=signed-in]', { timeout: WAIT_MS })
  t.pass('and still signed in after a reload')

  const rewritingUrl = `https://127.0.0.1:${rewritingPort}`
  t.same(await signInFrom(rewritingUrl, rewritingEdge, haproxy.dispatcher), { status: 200, code: undefined }, 'PUBLIC_ORIGIN, through the rewriting proxy')
  t.same(await signInFrom(rewritingUrl, edge, haproxy.dispatcher), { status: 403, code: 'CSRF_REJECTED' }, 'the shipped proxy\'s origin is foreign there: the Host was rewritten, and nothing forwarded')
  for (const url of [haproxy.url, rewritingUrl]) {
    t.same(await signInFrom(url, FOREIGN, haproxy.dispatcher), { status: 403, code: 'CSRF_REJECTED' }, `a foreign Origin through ${url === haproxy.url ? 'the shipped proxy' : 'the rewriting proxy'}`)
  }
})

import t from 'tap'
import { buildTestApp } from '../../helpers/app.js'

t.test('browser-facing routes carry security headers and CORS; machine-polled probes do not', async (t) => {
  const app = await buildTestApp(t, { CORS_ORIGIN: 'https://portal.example' })
  const origin = { origin: 'https://portal.example' }
  for (const url of ['/api/invoices', '/status', '/docs', '/docs/json', '/docs/static/index.html']) {
    const response = await app.inject({ url, headers: origin })
    t.equal(response.headers['x-content-type-options'], 'nosniff', `${url}: helmet`)
    t.ok(response.headers['content-security-policy'], `${url}: a content security policy`)
    t.equal(response.headers['access-control-allow-origin'], 'https://portal.example', `${url}: CORS for the portal`)
  }
  for (const url of ['/status', '/docs/json']) {
    const response = await app.inject({ url, headers: origin })
    t.match(response.headers['content-security-policy'], /script-src 'self'/, `${url}: Helmet's default policy for pages`)
    t.equal(response.headers['x-frame-options'], 'SAMEORIGIN', `${url}: framed by its own origin only`)
    t.equal(response.headers['cross-origin-opener-policy'], 'same-origin', `${url}: the document headers`)
  }
  const login = await app.inject({ method: 'POST', url: '/auth/login', headers: { ...origin, 'content-type': 'application/json' }, payload: '{}' })
  const invoices = await app.inject({ url: '/api/invoices', headers: origin })
  for (const [name, response] of [['login', login], ['/api/invoices', invoices]] as const) {
    t.equal(response.headers['content-security-policy'], "default-src 'none';frame-ancestors 'none'", `${name}: nothing loads in an API response or frames it`)
    t.equal(response.headers['x-frame-options'], 'DENY', `${name}: never framed`)
    t.equal(response.headers['x-content-type-options'], 'nosniff', `${name}: never sniffed`)
    t.match(response.headers['strict-transport-security'], /max-age=\d+/, `${name}: HTTPS only`)
    for (const header of ['cross-origin-opener-policy', 'origin-agent-cluster', 'x-dns-prefetch-control', 'x-download-options', 'x-permitted-cross-domain-policies', 'x-xss-protection']) {
      t.notOk(response.headers[header], `${name}: no ${header}, which only a document heeds`)
    }
  }
  const stranger = await app.inject({ url: '/api/invoices', headers: { origin: 'https://evil.example' } })
  t.not(stranger.headers['access-control-allow-origin'], 'https://evil.example', 'another origin is never allowed')
  for (const url of ['/health', '/health/queues', '/metrics']) {
    const response = await app.inject({ url, headers: origin })
    t.notOk(response.headers['x-content-type-options'], `${url}: no helmet hook`)
    t.notOk(response.headers['access-control-allow-origin'], `${url}: no CORS hook`)
  }
})

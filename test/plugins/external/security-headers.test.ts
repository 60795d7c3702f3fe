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
  const login = await app.inject({ method: 'POST', url: '/auth/login', headers: { ...origin, 'content-type': 'application/json' }, payload: '{}' })
  t.equal(login.headers['x-content-type-options'], 'nosniff', 'login: helmet')
  const stranger = await app.inject({ url: '/api/invoices', headers: { origin: 'https://evil.example' } })
  t.not(stranger.headers['access-control-allow-origin'], 'https://evil.example', 'another origin is never allowed')
  for (const url of ['/health', '/health/queues', '/metrics']) {
    const response = await app.inject({ url, headers: origin })
    t.notOk(response.headers['x-content-type-options'], `${url}: no helmet hook`)
    t.notOk(response.headers['access-control-allow-origin'], `${url}: no CORS hook`)
  }
})

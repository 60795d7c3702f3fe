import t from 'tap'
import { hostname } from 'node:os'
import { buildTestApp, startTestSandbox } from '../../helpers/app.js'

const OPS_TOKEN = 'ops-token-of-the-test-0123456789'
const GATED = ['/metrics', '/health/alerts', '/status', '/status/status.js', '/status/status.css', '/status/summary']
const PUBLIC = ['/health', '/health/live', '/health/ready', '/health/queues', '/health/queues/billing', '/health/queues/crm', '/api/health/services/cache', '/auth/health-check']

t.test('with OPS_TOKEN set, the operator endpoints answer 401 without it and 200 with it; the health endpoints stay public', async (t) => {
  const app = await buildTestApp(t, { OPS_TOKEN, CRM_EVENTS_ENABLED: 'true' })
  const basic = (password: string) => `Basic ${Buffer.from(`operator:${password}`).toString('base64')}`
  for (const url of GATED) {
    const anonymous = await app.inject(url)
    t.equal(anonymous.statusCode, 401, `${url}: 401 without the token`)
    t.match(anonymous.json(), { code: 'OPS_UNAUTHORIZED' })
    t.match(anonymous.headers['www-authenticate'], url.startsWith('/status') ? /^Basic realm=/ : /^Bearer realm=/, `${url}: the scheme to use`)
    t.equal((await app.inject({ url, headers: { authorization: 'Bearer not-the-token' } })).statusCode, 401, `${url}: 401 with another token`)
    t.equal((await app.inject({ url, headers: { authorization: `Bearer ${OPS_TOKEN}` } })).statusCode, 200, `${url}: 200 with the token`)
    t.equal((await app.inject({ url, headers: { authorization: basic(OPS_TOKEN) } })).statusCode, 200, `${url}: 200 with it as a Basic password`)
    t.equal((await app.inject({ url, headers: { authorization: basic('wrong') } })).statusCode, 401, `${url}: 401 with another password`)
  }
  for (const url of PUBLIC) {
    const response = await app.inject(url)
    t.ok(response.statusCode === 200 || response.statusCode === 503, `${url}: public (${response.statusCode})`)
  }
})

t.test('the public bodies carry no host name, process id, runtime version or security setting', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true' })
  await app.inject('/health/queues')
  // Wait for the subscription to report, so that its holder is in the body.
  for (let i = 0; i < 100 && (await app.inject('/health/queues')).json().events.holder === null; i++) await new Promise((resolve) => setTimeout(resolve, 50))
  const bodies = await Promise.all(PUBLIC.map(async (url) => [url, (await app.inject(url)).body] as const))
  t.match((await app.inject('/health/queues')).json().events.holder, { heldHere: true }, 'the lease holder is told as "this instance or not"')
  for (const [url, body] of bodies) {
    t.notMatch(body, hostname(), `${url}: no host name`)
    t.notMatch(body, `:${process.pid}`, `${url}: no process id`)
    t.notMatch(body, process.version, `${url}: no runtime version`)
    t.notMatch(body, /fail-(open|closed)|failOpenDecisions|AUTH_BLACKLIST/, `${url}: no security setting`)
  }
})

t.test('60 anonymous /auth/health-check calls in 6 s cost the CRM at most 2 REST calls', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const restCalls = () => sandbox.crm.calls.filter((call) => call.path.includes('/services/data/')).length
  const before = restCalls()
  for (let i = 0; i < 60; i++) {
    t.equal((await app.inject('/auth/health-check')).statusCode, 200)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  const spent = restCalls() - before
  t.ok(spent <= 2, `${spent} CRM REST calls`)
})

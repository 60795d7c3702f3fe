import t from 'tap'
import { buildTestApp, startTestSandbox, testKeyPrefix } from '../../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../../helpers/private-redis.js'
import { bearer, login } from '../../helpers/tokens.js'

t.test('past the limit: 429 with Retry-After, shared by two instances on one Redis', async (t) => {
  const sandbox = await startTestSandbox(t)
  const env = { RATE_LIMIT_MAX: '5', REDIS_KEY_PREFIX: testKeyPrefix() }
  const first = await buildTestApp(t, env, sandbox)
  const second = await buildTestApp(t, env, sandbox)
  const token = await login(first)

  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await first.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode)
  for (let i = 0; i < 2; i++) statuses.push((await second.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode)
  t.same(statuses, [200, 200, 200, 200, 200], 'five requests across both instances pass')
  const limited = await second.inject({ url: '/api/invoices', headers: bearer(token) })
  t.equal(limited.statusCode, 429, 'the sixth, on either instance, is limited')
  t.ok(Number(limited.headers['retry-after']) > 0, `Retry-After: ${limited.headers['retry-after']}`)
  t.match(limited.json(), { statusCode: 429, error: 'Too Many Requests', code: 'RATE_LIMITED', message: /retry in/ })

  const other = await login(first, 'john@example.com', 'battery-staple')
  t.equal((await first.inject({ url: '/api/invoices', headers: bearer(other) })).statusCode, 200, 'another client has its own budget')
  for (const url of ['/health', '/health/queues', '/api/health/services/cache', '/docs/json']) {
    const responses = await Promise.all(Array.from({ length: 8 }, () => first.inject(url)))
    t.ok(responses.every((response) => response.statusCode !== 429), `${url} is never limited`)
  }
})

t.test('login is limited more strictly, per IP', async (t) => {
  const app = await buildTestApp(t, { LOGIN_RATE_LIMIT_MAX: '3' })
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'guess' } })).statusCode)
  t.same(statuses, [401, 401, 401, 429])
})

t.test('with Redis down, limiting stops and requests pass; it is counted', async (t) => {
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { RATE_LIMIT_MAX: '2', AUTH_BLACKLIST_FAIL_CLOSED: 'false' })
  const token = await login(app)
  await redis.kill()
  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode)
  t.same(statuses, [200, 200, 200, 200, 200], 'nothing is limited')
  const bypassed = /^portal_bff_rate_limit_bypassed_total (\d+)$/m.exec((await app.inject('/metrics')).body)
  t.ok(Number(bypassed?.[1]) >= 5, `and /metrics says so: ${bypassed?.[0]}`)
})

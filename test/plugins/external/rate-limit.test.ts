import t from 'tap'
import { buildTestApp, startTestSandbox, testKeyPrefix } from '../../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../../helpers/private-redis.js'
import { bearer, login } from '../../helpers/tokens.js'
import { waitFor } from '../../helpers/processes.js'

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

t.test('an access token\'s request is counted with its revocation check, in one command; a revoked one is not counted', async (t) => {
  const sandbox = await startTestSandbox(t)
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { RATE_LIMIT_MAX: '5', TOKEN_FAILURES_MAX: '100' }, sandbox)
  const [token, revokedToken] = [await login(app), await login(app)]
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(revokedToken) })).statusCode, 204)
  const { sub } = app.jwt.decode<{ sub: string }>(token)!
  const countKey = `${app.config.REDIS_KEY_PREFIX}rate-limit:client:${sub}`

  // Every command that names the client's window: those the service sends, and the INCRs their scripts run.
  const monitored = redis.client(t)
  const monitor = await monitored.monitor()
  t.teardown(() => monitor.disconnect())
  const [sent, increments]: [string[][], string[][]] = [[], []]
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (!args.includes(countKey)) return
    if (source !== 'lua') sent.push(args)
    else if (args[0]!.toUpperCase() === 'INCR') increments.push(args)
  })

  for (let i = 0; i < 3; i++) t.equal((await app.inject({ url: '/api/invoices', headers: bearer(revokedToken) })).statusCode, 401, 'the revoked token is refused')
  // The logout was the client's first request of the window.
  const remaining = []
  for (let i = 0; i < 4; i++) {
    const response = await app.inject({ url: '/api/invoices', headers: bearer(token) })
    t.equal(response.statusCode, 200)
    t.equal(response.headers['x-ratelimit-limit'], '5')
    t.ok(Number(response.headers['x-ratelimit-reset']) > 0, `x-ratelimit-reset: ${response.headers['x-ratelimit-reset']}`)
    remaining.push(response.headers['x-ratelimit-remaining'])
  }
  t.same(remaining, ['3', '2', '1', '0'], 'each request counted once, none of the revoked token\'s')
  const limited = await app.inject({ url: '/api/invoices', headers: bearer(token) })
  t.equal(limited.statusCode, 429)
  t.match(limited.headers, { 'x-ratelimit-remaining': '0', 'retry-after': /^[1-9][0-9]*$/ })
  t.match(limited.json(), { code: 'RATE_LIMITED', message: /retry in \d+ seconds?|retry in 1 minute/ })

  await waitFor('the monitor\'s lines', async () => increments.length >= 5 && sent.length >= 8)
  t.equal(increments.length, 5, 'the window counted once a request of the live token')
  t.equal(sent.length, 8, 'by one command a request, the revoked token\'s included')
  const revocationKeys = [token, revokedToken].map((each) => `${app.config.REDIS_KEY_PREFIX}auth:blacklist:${app.jwt.decode<{ jti: string }>(each)!.jti}`)
  t.same(sent.map((args) => revocationKeys.filter((key) => args.includes(key)).length), Array(8).fill(1), 'each the token\'s revocation check')
})

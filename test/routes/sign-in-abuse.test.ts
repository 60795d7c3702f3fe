import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox } from '../helpers/app.js'
import { bearer, handMadeToken, login } from '../helpers/tokens.js'

// What a proxy in front of the service would pass on: the client's address, and the proxy's own as the socket's.
const PROXY = '10.0.0.1'
const signIn = (app: FastifyInstance, client: string, email = 'jane@example.com', password = 'wrong-guess') =>
  app.inject({ method: 'POST', url: '/auth/login', remoteAddress: PROXY, headers: { 'x-forwarded-for': client }, payload: { email, password } })

t.test('TRUST_PROXY set: the client address comes from X-Forwarded-For, so one client limited does not limit another', async (t) => {
  const app = await buildTestApp(t, { TRUST_PROXY: PROXY, LOGIN_RATE_LIMIT_MAX: '2', LOGIN_ACCOUNT_FAILURES_MAX: '50' })
  const first = []
  for (let i = 0; i < 3; i++) first.push((await signIn(app, '203.0.113.1')).statusCode)
  t.same(first, [401, 401, 429], 'the first client is limited')
  t.equal((await signIn(app, '203.0.113.2')).statusCode, 401, 'another client behind the same proxy is not')
})

t.test('TRUST_PROXY unset: X-Forwarded-For is ignored, so varying it buys nothing', async (t) => {
  const app = await buildTestApp(t, { LOGIN_RATE_LIMIT_MAX: '2', LOGIN_ACCOUNT_FAILURES_MAX: '50' })
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await signIn(app, `203.0.113.${i + 10}`)).statusCode)
  t.same(statuses, [401, 401, 429], 'every attempt counts against the socket\'s address')
})

t.test('failed sign-ins of one account are limited across addresses, never reach billing once limited, and say nothing of the account', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { TRUST_PROXY: 'true', LOGIN_ACCOUNT_FAILURES_MAX: '3' }, sandbox)
  const validateLogins = () => sandbox.billing.calls.filter((call) => call.params?.action === 'ValidateLogin').length

  for (const email of ['jane@example.com', 'nobody@example.com']) {
    const before = validateLogins()
    const statuses = []
    for (let i = 0; i < 5; i++) statuses.push((await signIn(app, `198.51.100.${i + 1}`, email)).statusCode)
    t.same(statuses, [401, 401, 401, 429, 429], `${email}: three failures from three addresses, then limited`)
    t.equal(validateLogins() - before, 3, `${email}: the limited attempts never reached billing`)
  }
  const known = await signIn(app, '198.51.100.9', 'jane@example.com')
  const unknown = await signIn(app, '198.51.100.9', 'nobody@example.com')
  // Alike but for the seconds left: each account's window started at its own first failure.
  const answer = (response: typeof known) => [response.statusCode, response.json().code, String(response.json().message).replace(/\d+ seconds/, 'N seconds')]
  t.same(answer(known), answer(unknown), 'an existing and a made-up account are answered alike')
  t.match(known.json(), { code: 'TOO_MANY_FAILED_SIGN_INS' })
  t.ok(Number(known.headers['retry-after']) > 0, 'retry-after says when')

  const right = await signIn(app, '198.51.100.10', 'jane@example.com', 'correct-horse')
  t.equal(right.statusCode, 429, 'while limited, even the right password waits: a guess cannot be confirmed')
  t.equal((await signIn(app, '198.51.100.11', 'john@example.com', 'battery-staple')).statusCode, 200, 'another account signs in')
})

t.test('failed token checks count against the client address: past TOKEN_FAILURES_MAX a minute, 429', async (t) => {
  const app = await buildTestApp(t, { TOKEN_FAILURES_MAX: '3' })
  const token = await login(app)
  const forged = handMadeToken({ sub: '1', jti: 'x', exp: Math.floor(Date.now() / 1000) + 600 })
  const from = (address: string, headers: Record<string, string>) => app.inject({ url: '/api/orders', remoteAddress: address, headers })
  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await from('192.0.2.1', bearer(forged))).statusCode)
  t.same(statuses, [401, 401, 401, 429, 429])
  const limited = await from('192.0.2.1', {})
  t.match(limited.json(), { code: 'RATE_LIMITED' }, 'no token at all counts too')
  t.equal((await from('192.0.2.2', bearer(forged))).statusCode, 401, 'another address has its own count')
  t.equal((await from('192.0.2.1', bearer(token))).statusCode, 200, 'a valid token is never held back: it costs no count')
})

import t from 'tap'
import { randomUUID } from 'node:crypto'
import { buildTestApp, startTestSandbox, testEnv } from '../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { before } from '../helpers/before.js'
import { bearer, handMadeToken, login } from '../helpers/tokens.js'
import { TOKEN_AUDIENCE, TOKEN_ISSUER } from '../../plugins/external/jwt.js'

const SECRET = testEnv().JWT_SECRET!
const ERROR_BODY = { statusCode: Number, error: String, message: String, code: String, correlationId: String }

t.test('login returns a Bearer token carrying the billing client id and a jti', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'correct-horse' } })
  t.equal(response.statusCode, 200)
  const body = response.json()
  t.match(body, { accessToken: String, expiresIn: 900, tokenType: 'Bearer' })
  const [header, claims] = body.accessToken.split('.').slice(0, 2).map((part: string) => JSON.parse(Buffer.from(part, 'base64url').toString()))
  t.equal(header.alg, 'HS256')
  t.equal(claims.sub, '1', 'the billing client id')
  t.match(claims.jti, /^[0-9a-f-]{36}$/)
  t.equal(claims.exp - claims.iat, 900)
})

t.test('a wrong login gets one generic 401, whatever was wrong', async (t) => {
  const app = await buildTestApp(t)
  const answers = []
  for (const payload of [{ email: 'jane@example.com', password: 'wrong' }, { email: 'nobody@example.com', password: 'correct-horse' }]) {
    const response = await app.inject({ method: 'POST', url: '/auth/login', payload })
    t.equal(response.statusCode, 401)
    const { correlationId: _ignored, ...body } = response.json()
    answers.push(body)
  }
  t.same(answers[0], { statusCode: 401, error: 'Unauthorized', message: 'Invalid email or password', code: 'INVALID_CREDENTIALS' })
  t.same(answers[1], answers[0], 'an unknown email and a wrong password look alike')
})

t.test('an account with two-factor authentication on gets 403 TWO_FACTOR_REQUIRED and no token, even with the right password', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'tom@example.com', password: 'second-factor' } })
  t.equal(response.statusCode, 403)
  t.match(response.json(), { ...ERROR_BODY, statusCode: 403, code: 'TWO_FACTOR_REQUIRED' })
  t.notOk('accessToken' in response.json())
  const wrong = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'tom@example.com', password: 'wrong' } })
  t.match(wrong.json(), { statusCode: 401, code: 'INVALID_CREDENTIALS' }, 'a wrong password is still the generic 401')
})

t.test('a WHMCS 8 user gets a token for the client with her email, never for the client whose id is her user id', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'nina@example.com', password: 'fresh-start' } })
  t.equal(response.statusCode, 200)
  const claims = JSON.parse(Buffer.from(response.json().accessToken.split('.')[1], 'base64url').toString())
  t.equal(claims.sub, '3', 'client 3, not client 4 (her user id, which is Tom\'s client)')
})

t.test('a user no billing client lists gets 403 NO_CLIENT_ACCOUNT and no token; one listed signs in as its client', async (t) => {
  const sandbox = await startTestSandbox(t, {
    billing: {
      clients: [
        // User 9 signs in as team@; client 8 has that email but lists only user 10, and there is no client 9.
        { id: 8, firstname: 'Shared', lastname: 'Inbox', email: 'team@acme.example', userEmail: 'lead@acme.example', userid: 10, password: 'lead-password' },
        { id: 20, firstname: 'Side', lastname: 'Project', email: 'side@acme.example', userEmail: 'team@acme.example', userid: 9, password: 'team-password' },
        { id: 7, firstname: 'Acme', lastname: 'Accounts', email: 'accounts@acme.example', userEmail: 'ops@acme.example', userid: 7, password: 'ops-password' }
      ]
    }
  })
  const app = await buildTestApp(t, {}, sandbox)
  const response = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'team@acme.example', password: 'team-password' } })
  t.equal(response.statusCode, 403)
  t.match(response.json(), { ...ERROR_BODY, statusCode: 403, code: 'NO_CLIENT_ACCOUNT' })
  t.notOk('accessToken' in response.json())

  const ops = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'ops@acme.example', password: 'ops-password' } })
  t.equal(ops.statusCode, 200, 'user 7 signs in with an email of its own: client 7 lists it')
  t.equal(app.jwt.decode<{ sub: string }>(ops.json().accessToken)?.sub, '7')
})

t.test('logout revokes the token', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 204)
  const after = await app.inject({ url: '/api/invoices', headers: bearer(token) })
  t.equal(after.statusCode, 401, 'the same token is refused')
  t.match(after.json(), { ...ERROR_BODY, code: 'UNAUTHORIZED' })
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(await login(app)) })).statusCode, 200, 'a new login works')
})

t.test('expired, forged, alg none and garbage tokens are 401 with the error body', async (t) => {
  const app = await buildTestApp(t)
  const now = Math.floor(Date.now() / 1000)
  const valid = { sub: '1', jti: randomUUID(), iat: now, exp: now + 600, iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE }
  const tokens = {
    expired: handMadeToken({ ...valid, iat: now - 1000, exp: now - 100 }, { secret: SECRET }),
    'wrongly signed': handMadeToken(valid, { secret: 'not-the-service-secret-but-just-as-long' }),
    'alg none': handMadeToken(valid, { alg: 'none' }),
    'other algorithm': handMadeToken(valid, { secret: SECRET, alg: 'HS512' }),
    'no jti': handMadeToken({ sub: '1', iat: now, exp: now + 600, iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE }, { secret: SECRET }),
    garbage: 'not.a.token',
    empty: ''
  }
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(handMadeToken(valid, { secret: SECRET })) })).statusCode, 200, 'the hand-made token is sound when signed right')
  for (const [kind, token] of Object.entries(tokens)) {
    const response = await app.inject({ url: '/api/invoices', headers: bearer(token) })
    t.equal(response.statusCode, 401, kind)
    t.match(response.json(), { ...ERROR_BODY, statusCode: 401, code: 'UNAUTHORIZED' }, `${kind}: the contract's error body`)
  }
  const missing = await app.inject({ url: '/api/invoices' })
  t.equal(missing.statusCode, 401, 'no token')
  t.equal((await app.inject('/api/health/services/cache')).statusCode, 200, '/api/health/* stays public')
})

t.test('a token accepted once is refused once it expires: its verified claims are kept no longer than it lives', async (t) => {
  const app = await buildTestApp(t)
  const now = Math.floor(Date.now() / 1000)
  const claims = { sub: '1', jti: randomUUID(), iat: now, exp: now + 2, iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE }
  const token = handMadeToken(claims, { secret: SECRET })
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200, 'accepted while it lives')
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200, 'and again, from the verified claims kept')
  await new Promise((resolve) => setTimeout(resolve, (claims.exp + 1) * 1000 - Date.now()))
  const expired = await app.inject({ url: '/api/invoices', headers: bearer(token) })
  t.equal(expired.statusCode, 401, 'refused after its exp')
  t.match(expired.json(), { ...ERROR_BODY, code: 'UNAUTHORIZED' })
})

t.test('a bearer header of any other form is 401', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)
  t.equal((await app.inject({ url: '/api/invoices', headers: { authorization: `bearer ${token}` } })).statusCode, 200, 'the scheme in any case')
  for (const authorization of [`Bearer  ${token}`, `Bearer ${token} extra`, `Basic ${token}`, 'Bearer ', token]) {
    t.equal((await app.inject({ url: '/api/invoices', headers: { authorization } })).statusCode, 401, JSON.stringify(authorization.slice(0, 12)))
  }
})

t.test('with Redis down, token checks and sign-in fail closed by default and open when told; logout is 503 either way', async (t) => {
  const sandbox = await startTestSandbox(t)
  for (const failClosed of [true, false]) {
    const { redis, app } = await buildTestAppOnPrivateRedis(t, { AUTH_BLACKLIST_FAIL_CLOSED: String(failClosed) }, sandbox)
    const token = await login(app)
    await redis.kill()
    const response = await app.inject({ url: '/api/invoices', headers: bearer(token) })
    const health = (await app.inject('/status/summary')).json()
    if (failClosed) {
      t.equal(response.statusCode, 503, 'fail closed: 503')
      t.match(response.json(), { code: 'AUTH_UNAVAILABLE', message: 'Authentication is temporarily unavailable' })
      t.match(health.blacklist, { mode: 'fail-closed', available: false, failOpenDecisions: 0 })
    } else {
      t.equal(response.statusCode, 200, 'fail open: the request passes')
      t.match(health.blacklist, { mode: 'fail-open', available: false, failOpenDecisions: 1 }, 'and the counter moves')
    }
    const logout = await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })
    t.equal(logout.statusCode, 503, `${failClosed ? 'fail closed' : 'fail open'}: logout is 503, the revocation cannot be stored`)
    t.match(logout.json(), { code: 'AUTH_UNAVAILABLE' })
    const billingCalls = sandbox.billing.calls.length
    const signIn = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'jane@example.com', password: 'correct-horse' } })
    if (failClosed) {
      t.equal(signIn.statusCode, 503, 'fail closed: no token is issued that no check could pass')
      t.match(signIn.json(), { code: 'AUTH_UNAVAILABLE' })
      t.equal(sandbox.billing.calls.length, billingCalls, 'billing is not asked')
    } else {
      t.equal(signIn.statusCode, 200, 'fail open: sign-in goes on')
    }
  }
})

t.test('with Redis hung, a token check answers 503 AUTH_UNAVAILABLE once the command timeout passes, and recovers', async (t) => {
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { REDIS_COMMAND_TIMEOUT_MS: '500' })
  const token = await login(app)
  redis.hang()
  // Redis never answers: only the command timeout (500 ms) can end the check, long before 30 s.
  const response = await before(30_000, app.inject({ url: '/api/invoices', headers: bearer(token) }))
  if (response === undefined) throw new Error('no answer within 30 s: the token check hung with Redis')
  t.equal(response.statusCode, 503, 'answered at the command timeout, not a hang')
  t.match(response.json(), { code: 'AUTH_UNAVAILABLE' })
  redis.resume()
  let status = 0
  for (let attempt = 0; attempt < 50 && status !== 200; attempt++) {
    status = (await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode
    if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(status, 200, 'served again once Redis answers')
})

t.test('billing refusing the API credentials: login is 503 BILLING_UNAVAILABLE, not a 401, and no secret in the body', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { BILLING_API_SECRET: 'a-secret-billing-does-not-know' }, sandbox)
  const response = await app.inject({ method: 'POST', url: '/auth/login', headers: { 'x-correlation-id': 'login-creds' }, payload: { email: 'jane@example.com', password: 'correct-horse' } })
  t.equal(response.statusCode, 503, 'the portal user is not to blame')
  t.same(response.json(), {
    statusCode: 503,
    error: 'Service Unavailable',
    message: 'Billing service is temporarily unavailable',
    code: 'BILLING_UNAVAILABLE',
    correlationId: 'login-creds'
  })
  t.notMatch(response.body, /a-secret-billing-does-not-know|Authentication Failed|credentials/, 'nothing of the secret or the upstream answer')
  const check = (await app.inject('/auth/health-check')).json()
  t.match(check.checks.billing, { status: 'fail', error: 'auth_failed' }, 'the billing check names the class')
})

t.test('billing down or answering result=error: login is 503 BILLING_UNAVAILABLE, nothing of the upstream in the body', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const faults = [
    { name: 'connection refused', break: () => sandbox.billing.down(), mend: () => sandbox.billing.up() },
    { name: 'result=error', break: () => sandbox.billing.injectFault({ kind: 'error', route: 'ValidateLogin' }), mend: () => sandbox.billing.clearFaults() },
    { name: 'the client lookup after ValidateLogin failing', break: () => sandbox.billing.injectFault({ kind: 'http5xx', route: 'GetClientsDetails' }), mend: () => sandbox.billing.clearFaults() }
  ]
  for (const fault of faults) {
    await fault.break()
    const response = await app.inject({ method: 'POST', url: '/auth/login', headers: { 'x-correlation-id': 'login-1' }, payload: { email: 'jane@example.com', password: 'correct-horse' } })
    t.equal(response.statusCode, 503, `${fault.name}: 503`)
    t.same(response.json(), {
      statusCode: 503,
      error: 'Service Unavailable',
      message: 'Billing service is temporarily unavailable',
      code: 'BILLING_UNAVAILABLE',
      correlationId: 'login-1'
    }, `${fault.name}: the error shape, not a 401`)
    t.notMatch(response.body, /127\.0\.0\.1|localhost|ECONN|api\.php|unexpected error occurred|Error:|\bat .+\.[jt]s/, `${fault.name}: no host, upstream text or stack`)
    await fault.mend()
  }
  t.ok(await login(app), 'mended: login works again')
})

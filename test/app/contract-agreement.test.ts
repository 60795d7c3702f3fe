import t from 'tap'
import { buildTestApp } from '../helpers/app.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'
import { CSRF, ORDER, startSession } from '../helpers/sessions.js'
import { documentOf, documentValidators } from '../helpers/openapi.js'

t.test('/metrics: the document says what the answers are, text for the metrics and JSON for a refusal', async (t) => {
  const app = await buildTestApp(t, { OPS_TOKEN: 'an-operations-token-of-some-length' })
  const { responses } = documentOf(app).paths['/metrics']!.get!
  t.same(Object.keys(responses['200']?.content ?? {}), ['text/plain', 'application/openmetrics-text'])
  t.same(Object.keys(responses['401']?.content ?? {}), ['application/json'])
  const refused = await app.inject('/metrics')
  t.equal(refused.statusCode, 401)
  t.match(refused.headers['content-type'], /^application\/json/)
  const served = await app.inject({ url: '/metrics', headers: { authorization: 'Bearer an-operations-token-of-some-length' } })
  t.equal(served.statusCode, 200)
  t.match(served.headers['content-type'], /^text\/plain/)
})

t.test('an email the document accepts the server accepts, and one it refuses the server refuses', async (t) => {
  const app = await buildTestApp(t)
  const document = documentOf(app)
  const emailSchema = (document.components.schemas.LoginRequest!.properties as Record<string, object>).email!
  t.notOk('format' in emailSchema, 'one rule, stated as a pattern, not a format each side reads its own way')
  const documented = documentValidators(document)(emailSchema as Record<string, unknown>)
  const emails = ['jane@example.com', 'müller@example.de', '用户@例子.广告', 'a+b@sub.example.co.uk', '0@com', 'jane@', '@example.com', 'jane example@example.com', 'jane@@example.com', 'jane\u0000@example.com', 'x@y.']
  for (const email of emails) {
    const response = await app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'wrong' } })
    const accepted = response.statusCode !== 400
    t.equal(accepted, documented(email), `${JSON.stringify(email)}: ${response.statusCode}, the document ${documented(email) ? 'accepts' : 'refuses'} it`)
    if (accepted) t.equal(response.statusCode, 401, `${email}: billing judges it`)
  }
})

t.test('a cookie naming no session is a 401, with or without x-csrf; a live session without x-csrf is the 403', async (t) => {
  const app = await buildTestApp(t)
  const dead = { cookie: `${SESSION_COOKIE}=no-such-session` }
  const place = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/api/orders', headers, payload: ORDER })
  for (const [name, headers] of Object.entries({ 'without x-csrf': dead, 'with x-csrf': { ...dead, ...CSRF }, 'cross-site': { ...dead, ...CSRF, 'sec-fetch-site': 'cross-site' } })) {
    const response = await place(headers)
    t.equal(response.statusCode, 401, `a dead cookie ${name}: 401`)
    t.equal(response.json().code, 'UNAUTHORIZED')
  }
  const { cookie } = await startSession(app)
  const refused = await place(cookie)
  t.equal(refused.statusCode, 403, 'a live session without x-csrf: 403')
  t.equal(refused.json().code, 'CSRF_REJECTED')
})

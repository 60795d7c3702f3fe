import t from 'tap'
import { connect } from 'node:net'
import { request } from 'undici'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, tempDir } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'
import { bearer, login } from '../helpers/tokens.js'

interface Case {
  name: string
  method?: 'GET' | 'POST'
  url: string
  headers?: Record<string, string>
  body?: string
  authenticated?: boolean
  /** When one status alone is right. */
  status?: number
}

const json = { 'content-type': 'application/json' }
const loginWith = (body: string): Case => ({ name: `login ${body.slice(0, 40)}`, method: 'POST', url: '/auth/login', headers: json, body })
// A body is taken as the client typed it: a value of another type is refused, never coerced.
const orderWith = (body: string): Case => ({ name: `order ${body}`, method: 'POST', url: '/api/orders', headers: json, body, authenticated: true, status: 400 })

const cases: Case[] = [
  loginWith('{"email":'),
  loginWith('not json at all'),
  loginWith('[]'),
  loginWith('null'),
  loginWith('{"email":5,"password":["x"]}'),
  loginWith('{"email":"jane@example.com"}'),
  loginWith('{"email":"jane@example.com","password":"correct-horse","admin":true}'),
  loginWith('{"email":"not-an-email","password":"x"}'),
  loginWith(`{"email":"jane@example.com","password":"${'x'.repeat(300)}"}`),
  loginWith(JSON.stringify({ email: 'jane@example.com', password: 'x'.repeat(70 * 1024) })),
  loginWith('{"email":"jane@example.com","password":"x","__proto__":{"admin":true}}'),
  loginWith('{"email":["jane@example.com"],"password":"correct-horse"}'),
  orderWith('{"productId":true,"billingCycle":"monthly"}'),
  orderWith('{"productId":"1.5","billingCycle":"monthly"}'),
  orderWith('{"productId":"01","billingCycle":"monthly"}'),
  orderWith('{"productId":1000000000,"billingCycle":"monthly"}'),
  orderWith('{"productId":"1000000000","billingCycle":"monthly"}'),
  orderWith('{"productId":[1],"billingCycle":"monthly"}'),
  orderWith('{"productId":1,"billingCycle":["monthly"]}'),
  orderWith('{"productId":null,"billingCycle":"monthly"}'),
  { name: 'login as text/plain', method: 'POST', url: '/auth/login', headers: { 'content-type': 'text/plain' }, body: 'email=jane' },
  { name: 'login with no body', method: 'POST', url: '/auth/login', headers: json },
  { name: 'logout without a token', method: 'POST', url: '/auth/logout' },
  { name: 'Basic credentials', url: '/api/invoices', headers: { authorization: 'Basic amFuZTpjb3JyZWN0LWhvcnNl' } },
  { name: 'Bearer with nothing', url: '/api/invoices', headers: { authorization: 'Bearer' } },
  { name: 'page 0', url: '/api/invoices?page=0', authenticated: true },
  { name: 'page not a number', url: '/api/invoices?page=abc', authenticated: true },
  { name: 'limit too large', url: '/api/invoices?limit=1000', authenticated: true },
  { name: 'unknown status', url: '/api/invoices?status=Bogus', authenticated: true },
  { name: 'unknown query field', url: '/api/invoices?admin=1', authenticated: true },
  { name: 'invoice id not a number', url: '/api/invoices/abc', authenticated: true },
  { name: 'negative invoice id', url: '/api/invoices/-1', authenticated: true },
  { name: 'fractional invoice id', url: '/api/invoices/1.5', authenticated: true },
  { name: 'huge invoice id', url: '/api/invoices/99999999999999999999999', authenticated: true },
  { name: 'invoice id with SQL', url: '/api/invoices/1;DROP%20TABLE%20orders', authenticated: true },
  { name: 'order id not a uuid', url: '/api/orders/abc', authenticated: true },
  { name: 'order id as a uuid URN', url: '/api/orders/urn:uuid:f7e385d1-e2c6-4de0-8061-aa195959b416', authenticated: true },
  { name: 'order id as a braced uuid', url: '/api/orders/%7Bf7e385d1-e2c6-4de0-8061-aa195959b416%7D', authenticated: true },
  { name: 'dot segments', url: '/api/invoices/..%2F..%2Fetc%2Fpasswd', authenticated: true },
  { name: 'encoded NUL', url: '/health%00', authenticated: false },
  { name: 'a lone percent sign', url: '/health%', authenticated: false },
  { name: 'a broken UTF-8 escape', url: '/api/invoices/%E0%A4%A', authenticated: true },
  { name: 'unknown route', url: '/api/../../etc/passwd' },
  { name: 'wrong method', method: 'POST', url: '/health', headers: json, body: '{}' },
  { name: '10 KB correlation id', url: '/api/invoices?page=0', headers: { 'x-correlation-id': 'c'.repeat(10 * 1024) }, authenticated: true }
]

const LEAKS = /\bat [^\n]*\.(ts|js):\d+|node_modules|stack|ECONN|password authentication|SQLSTATE|syntax error at|Error: /

t.test('every kind of bad input gets a clear 4xx in the contract shape, never a 5xx or a leak', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)
  for (const item of cases) {
    const headers = { ...item.headers, ...(item.authenticated === true ? bearer(token) : {}) }
    const response = await app.inject({ method: item.method ?? 'GET', url: item.url, headers, ...(item.body !== undefined && { payload: item.body }) })
    t.ok(response.statusCode >= 400 && response.statusCode < 500, `${item.name}: ${response.statusCode}`)
    if (item.status !== undefined) t.equal(response.statusCode, item.status, `${item.name}: ${item.status}`)
    const body = response.json()
    t.match(body, { statusCode: response.statusCode, error: String, message: String, code: String, correlationId: String }, `${item.name}: error body`)
    t.equal(response.headers['x-correlation-id'], body.correlationId, `${item.name}: the correlation id in the header too`)
    t.notMatch(response.body, LEAKS, `${item.name}: no stack or driver text`)
  }
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200, 'and nothing was lost: the service still serves')
  t.equal((await app.inject({ url: '/api/orders', headers: bearer(token) })).json().total, 0, 'no refused body placed an order')
})

/** One raw HTTP/1.1 exchange: what the server wrote before closing. */
function rawExchange (address: string, request: string): Promise<string> {
  return new Promise<string>((resolve) => {
    const { port } = new URL(address)
    const socket = connect(Number(port), '127.0.0.1', () => socket.end(request))
    let text = ''
    socket.on('data', (chunk) => { text += chunk })
    socket.on('close', () => resolve(text))
  })
}

t.test('requests the HTTP parser refuses get the error shape and a correlation id too', async (t) => {
  const app = await buildTestApp(t)
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const response = await request(`${address}/health/live`, { headers: { 'x-padding': 'p'.repeat(20 * 1024) } })
  t.equal(response.statusCode, 431, 'oversized headers: 431')
  const body = await response.body.json() as Record<string, unknown>
  t.match(body, { statusCode: 431, error: 'Request Header Fields Too Large', code: 'HEADERS_TOO_LARGE', message: String, correlationId: /^[0-9a-f-]{36}$/ })
  t.equal(response.headers['x-correlation-id'], body.correlationId, 'the correlation id in the header too')

  const cases = {
    'a malformed header line': 'GET /health/live HTTP/1.1\r\nHost: x\r\nBroken header line\r\n\r\n',
    'a control character in a header': 'GET /health/live HTTP/1.1\r\nHost: x\r\nLast-Event-ID: a\u0001b\r\n\r\n',
    'an unknown method': 'FOO /api/orders HTTP/1.1\r\nHost: x\r\n\r\n'
  }
  for (const [name, raw] of Object.entries(cases)) {
    const answer = await rawExchange(address, raw)
    t.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/, `${name}: 400`)
    const [head = '', text = ''] = answer.split('\r\n\r\n')
    const correlationId = /x-correlation-id: ([0-9a-f-]{36})/.exec(head)?.[1]
    t.ok(correlationId, `${name}: a correlation id header`)
    t.same(JSON.parse(text), { statusCode: 400, error: 'Bad Request', message: 'The request is not valid HTTP', code: 'MALFORMED_REQUEST', correlationId }, `${name}: the error shape`)
  }
})

t.test('a slow-header client is cut within REQUEST_RECEIVE_TIMEOUT_MS and a second, with a 408', async (t) => {
  const timeoutMs = 1500
  const app = await buildTestApp(t, { REQUEST_RECEIVE_TIMEOUT_MS: String(timeoutMs) })
  const address = new URL(await app.listen({ port: 0, host: '127.0.0.1' }))
  // The client never ends its headers: only the receive timeout can end the exchange.
  const answer = await new Promise<string>((resolve) => {
    const socket = connect(Number(address.port), '127.0.0.1', () => socket.write('GET /health/live HTTP/1.1\r\nHost: x\r\n'))
    // A header line now and then, never the blank line that ends them.
    const drip = setInterval(() => { if (socket.writable) socket.write('X-Slow: 1\r\n') }, 200)
    let text = ''
    socket.on('data', (chunk) => { text += chunk })
    socket.on('error', () => {})
    socket.on('close', () => {
      clearInterval(drip)
      resolve(text)
    })
  })
  t.match(answer, /^HTTP\/1\.1 408 /, 'cut by the receive timeout, answered 408')
  t.match(answer, /"code":"REQUEST_TIMEOUT"/)
})

t.test('a request refused before routing leaves a log line with its correlation id', async (t) => {
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { LOG_DIR: logDir })
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const badLine = await rawExchange(address, 'GET /health/live HTTP/1.1\r\nHost: x\r\nBroken header line\r\n\r\n')
  const badUrl = await app.inject('/api/orders/%E0%A4%A')
  await app.close()
  // The log file is written asynchronously: on a busy machine the lines may land after the close.
  const refusedLines = () => readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.message === 'request refused before routing')
  await waitFor('both refusals logged', async () => refusedLines().length >= 2)
  const refused = refusedLines()
  const lineId = /x-correlation-id: ([0-9a-f-]{36})/.exec(badLine)?.[1]
  t.match(refused.find((line) => line.correlationId === lineId), { level: 30, statusCode: 400, code: 'MALFORMED_REQUEST' }, 'the bad request line')
  t.match(refused.find((line) => line.correlationId === badUrl.headers['x-correlation-id']), { level: 30, statusCode: 400, code: 'FST_ERR_BAD_URL' }, 'the malformed URL')
})

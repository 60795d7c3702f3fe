import t, { type Test } from 'tap'
import { connect } from 'node:net'
import { Writable } from 'node:stream'
import Fastify from 'fastify'
import pg from 'pg'
import { Type } from '@sinclair/typebox'
import errorHandler from '../../../plugins/app/error-handler.js'
import correlation from '../../../plugins/app/correlation.js'
import { RequestLogController, correlationIdOf } from '../../../lib/request-log.js'
import { AuthUnavailableError, DatabaseUnavailableError } from '../../../lib/errors.js'
import { before } from '../../helpers/before.js'
import { freePort } from '../../helpers/ports.js'
import { buildTestApp, testConfig } from '../../helpers/app.js'

async function bareApp (t: Test) {
  const app = Fastify({ genReqId: correlationIdOf, logController: new RequestLogController(), ajv: { customOptions: { removeAdditional: false } } })
  app.decorate('config', testConfig())
  await app.register(errorHandler)
  await app.register(correlation)
  t.teardown(() => app.close())
  return app
}

t.test('an unreachable database answers 500 DATABASE_UNAVAILABLE, fast, without driver text', async (t) => {
  const app = await bareApp(t)
  const port = await freePort()
  // A connect timeout far above a refusal's: an answer before it did not wait for one.
  const pool = new pg.Pool({ connectionString: `postgres://postgres:pw-secret@127.0.0.1:${port}/portal`, connectionTimeoutMillis: 30_000 })
  t.teardown(() => pool.end())
  app.get('/api/things', async () => (await pool.query('SELECT 1')).rows)
  const response = await before(30_000, app.inject({ url: '/api/things', headers: { 'x-correlation-id': 'db-down' } }))
  if (response === undefined) throw new Error('no answer before the connect timeout: the refusal was not taken as such')
  t.pass('fails fast: before the connect timeout')
  t.equal(response.statusCode, 500)
  t.same(response.json(), {
    statusCode: 500,
    error: 'Internal Server Error',
    message: 'Database is temporarily unavailable',
    code: 'DATABASE_UNAVAILABLE',
    correlationId: 'db-down'
  })
  t.notMatch(response.body, /ECONNREFUSED|127\.0\.0\.1|pw-secret|at .*\.js/)
})

t.test('an unexpected 5xx hides its message and stack', async (t) => {
  const app = await bareApp(t)
  app.get('/api/boom', async () => { throw new Error('connect to db.internal:5432 with password=hunter2 failed') })
  const response = await app.inject('/api/boom')
  t.equal(response.statusCode, 500)
  t.match(response.json(), { statusCode: 500, error: 'Internal Server Error', message: 'Internal Server Error', code: 'INTERNAL_ERROR' })
  t.notMatch(response.body, /db\.internal|hunter2|stack/)
})

t.test('bad input is a 4xx in the contract shape', async (t) => {
  const app = await bareApp(t)
  app.post('/api/things', { schema: { body: Type.Object({ name: Type.String() }, { additionalProperties: false }) } }, async () => ({ ok: true }))
  const wrongType = await app.inject({ method: 'POST', url: '/api/things', payload: { name: 42, extra: true } })
  t.equal(wrongType.statusCode, 400)
  t.match(wrongType.json(), { statusCode: 400, error: 'Bad Request', code: 'FST_ERR_VALIDATION', message: /body/ })
  const malformed = await app.inject({ method: 'POST', url: '/api/things', headers: { 'content-type': 'application/json' }, payload: '{"name":' })
  t.equal(malformed.statusCode, 400)
  t.match(malformed.json(), { statusCode: 400, code: /^FST_ERR_CTP/ })
})

t.test('a body the client cuts off is the client\'s error: no error line, not a database outage', async (t) => {
  const lines: Array<{ level: number, msg: string }> = []
  const stream = new Writable({ write (chunk: Buffer, _encoding, done) { lines.push(JSON.parse(chunk.toString())); done() } })
  const app = Fastify({ logger: { level: 'info', stream } })
  app.decorate('config', testConfig())
  await app.register(errorHandler)
  app.post('/api/things', async () => ({ ok: true }))
  const errors: Array<{ code?: string, statusCode?: number }> = []
  app.addHook('onError', async (_request, _reply, error) => { errors.push(error) })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  const socket = connect(port, '127.0.0.1', () => {
    socket.write('POST /api/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":')
    setTimeout(() => socket.destroy(), 100)
  })
  for (let waited = 0; errors.length === 0 && waited < 3000; waited += 50) await new Promise(resolve => setTimeout(resolve, 50))
  await new Promise(resolve => setTimeout(resolve, 50))
  t.match(errors, [{ code: 'ECONNRESET', statusCode: 400 }], 'the request failed as the client cut it off')
  t.same(lines.filter((line) => line.level >= 50), [], 'nothing logged at error')
})

t.test('a refusal of a dependency in an outage (its own outage log says it once) logs no error of its own and completes at warn; another 5xx logs both at error', async (t) => {
  const lines: Array<{ level: number, msg: string, statusCode?: number }> = []
  const stream = new Writable({ write (chunk: Buffer, _encoding, done) { lines.push(JSON.parse(chunk.toString())); done() } })
  const app = Fastify({ logger: { level: 'info', stream }, genReqId: correlationIdOf, logController: new RequestLogController() })
  app.decorate('config', testConfig())
  await app.register(errorHandler)
  t.teardown(() => app.close())
  app.get('/api/auth-outage', async () => { throw new AuthUnavailableError() })
  app.get('/api/database-outage', async () => { throw new DatabaseUnavailableError() })
  app.get('/api/boom', async () => { throw new Error('boom') })
  for (const url of ['/api/auth-outage', '/api/database-outage']) {
    lines.length = 0
    const response = await app.inject(url)
    t.ok(response.statusCode >= 500, `${url}: ${response.statusCode}`)
    t.same(lines.map(({ level, msg }) => [level, msg]), [[40, 'request completed']], `${url}: only its completion line, at warn`)
  }
  lines.length = 0
  await app.inject('/api/boom')
  t.same(lines.map(({ level, msg }) => [level, msg]), [[50, 'request failed'], [50, 'request completed']], 'an unexplained 5xx: its error and its completion, at error')
})

t.test('unknown routes are 404 in the same shape, with the correlation id header', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject({ url: '/api/nothing-here', headers: { 'x-correlation-id': 'lost-1' } })
  t.equal(response.statusCode, 404)
  t.equal(response.headers['x-correlation-id'], 'lost-1')
  t.same(response.json(), { statusCode: 404, error: 'Not Found', message: 'Route GET /api/nothing-here not found', code: 'NOT_FOUND', correlationId: 'lost-1' })
})

t.test('a path that exists, asked with a method it does not take, is a 405 naming method and path, with Allow', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject({ method: 'DELETE', url: '/health?x=1' })
  t.equal(response.statusCode, 405)
  t.equal(response.headers.allow, 'GET, HEAD')
  t.match(response.json(), { statusCode: 405, code: 'METHOD_NOT_ALLOWED', message: 'Method DELETE is not served at /health: the Allow header lists those that are' })
})

t.test('a method Fastify knows but no route takes (QUERY, without a body or content type): 405 on a path that exists, else 404', async (t) => {
  const app = await buildTestApp(t)
  const served = await app.inject({ method: 'QUERY' as 'GET', url: '/api/orders' })
  t.equal(served.statusCode, 405, 'QUERY /api/orders')
  t.equal(served.headers.allow, 'GET, HEAD, POST')
  const unknown = await app.inject({ method: 'QUERY' as 'GET', url: '/no-such-route' })
  t.equal(unknown.statusCode, 404, 'QUERY /no-such-route')
  t.match(unknown.json(), { statusCode: 404, code: 'NOT_FOUND', message: 'Route QUERY /no-such-route not found' })
})

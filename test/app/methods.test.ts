import t from 'tap'
import { buildTestApp } from '../helpers/app.js'
import { bearer, login } from '../helpers/tokens.js'

type OpenApiDocument = { paths: Record<string, Record<string, unknown>> }
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE']

t.test('a method a path does not serve answers 405 with Allow in the contract shape; a path no route takes stays 404', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)

  const put = await app.inject({ method: 'PUT', url: '/api/orders', headers: bearer(token), payload: {} })
  t.equal(put.statusCode, 405, 'PUT /api/orders: 405')
  t.equal(put.headers.allow, 'GET, HEAD, POST', 'the methods /api/orders serves')
  t.match(put.json(), { statusCode: 405, error: 'Method Not Allowed', code: 'METHOD_NOT_ALLOWED', message: String, correlationId: put.headers['x-correlation-id'] })

  const remove = await app.inject({ method: 'DELETE', url: '/health' })
  t.equal(remove.statusCode, 405, 'DELETE /health: 405')
  t.equal(remove.headers.allow, 'GET, HEAD')
  t.equal((await app.inject({ method: 'OPTIONS', url: '/health' })).statusCode, 405, 'OPTIONS other than a CORS preflight too')

  t.equal((await app.inject({ method: 'PATCH', url: '/api/orders/f7e385d1-e2c6-4de0-8061-aa195959b416?x=1' })).headers.allow, 'GET, HEAD', 'a path with a parameter and a query')
  for (const method of ['GET', 'PUT', 'DELETE']) {
    const unknown = await app.inject({ method: method as 'GET', url: '/api/nothing-here' })
    t.equal(unknown.statusCode, 404, `${method} of an unknown path: 404`)
    t.equal(unknown.headers.allow, undefined, 'no Allow')
    t.equal(unknown.json().code, 'NOT_FOUND')
  }
})

t.test('every path of the OpenAPI document answers 405 to each method it does not document, and the document lists no such method', async (t) => {
  const app = await buildTestApp(t)
  const document = app.swagger() as unknown as OpenApiDocument
  for (const [path, operations] of Object.entries(document.paths)) {
    const documented = Object.keys(operations).map((method) => method.toUpperCase())
    const url = path.replaceAll(/\{[^}]+\}/g, '1')
    for (const method of METHODS.filter((method) => !documented.includes(method))) {
      const response = await app.inject({ method: method as 'GET', url })
      t.equal(response.statusCode, 405, `${method} ${path}: 405`)
      const allowed = String(response.headers.allow).split(', ')
      t.ok(documented.every((method) => allowed.includes(method)) && !allowed.includes(method), `${method} ${path}: Allow ${response.headers.allow}`)
    }
  }
})

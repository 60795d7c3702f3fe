import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../helpers/app.js'
import { bearer, login } from '../helpers/tokens.js'

interface OpenApiOperation { parameters?: Array<{ in: string, name: string }> }
type OpenApiDocument = { paths: Record<string, Record<string, OpenApiOperation>> }

/** Every GET of the app's own OpenAPI document that takes `page` and `limit` in its query: not a hand list. */
function pagedRoutes (app: FastifyInstance): string[] {
  const document = app.swagger() as unknown as OpenApiDocument
  return Object.entries(document.paths).filter(([, operations]) => {
    const names = new Set((operations.get?.parameters ?? []).filter((parameter) => parameter.in === 'query').map((parameter) => parameter.name))
    return names.has('page') && names.has('limit')
  }).map(([path]) => path)
}

const NOT_FINITE_OR_TOO_LARGE = ['Infinity', '-Infinity', 'NaN', '1e999', '1e400', '-1e400', '1234567890123456789012345', '-1234567890123456789012345', '1e21', '9007199254740993']

t.test('page and limit of every paged route are finite integers within bounds: anything else is a 400 in the contract shape', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)
  const routes = pagedRoutes(app)
  t.ok(routes.includes('/api/orders') && routes.includes('/api/invoices') && routes.includes('/health/events/parked'), `paged routes: ${routes.join(', ')}`)
  for (const route of routes) {
    t.equal((await app.inject({ url: `${route}?page=1&limit=5`, headers: bearer(token) })).statusCode, 200, `${route}: a page within bounds is served`)
    for (const name of ['page', 'limit']) {
      for (const value of NOT_FINITE_OR_TOO_LARGE) {
        const response = await app.inject({ url: `${route}?${name}=${encodeURIComponent(value)}`, headers: bearer(token) })
        t.equal(response.statusCode, 400, `${route}?${name}=${value}: 400`)
        t.match(response.json(), { statusCode: 400, error: 'Bad Request', code: String, message: String, correlationId: response.headers['x-correlation-id'] }, `${route}?${name}=${value}: the error body`)
      }
    }
  }
})

import t from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import { exactBodyValidator } from '../../lib/validator.js'

async function appWithRoute () {
  const app = Fastify({ ajv: { customOptions: { removeAdditional: false } }, schemaController: { compilersFactory: { buildValidator: exactBodyValidator() } } })
  app.post('/things', {
    schema: {
      headers: Type.Object({ 'X-Count': Type.Integer() }),
      querystring: Type.Object({ page: Type.Integer() }),
      body: Type.Object({ quantity: Type.Integer() })
    }
  }, async (request) => ({ count: request.headers['x-count'], page: request.query, body: request.body }))
  await app.ready()
  return app
}

t.test('a body is validated as typed; the query and headers are converted, header names in any case', async (t) => {
  const app = await appWithRoute()
  t.teardown(() => app.close())
  const ok = await app.inject({ method: 'POST', url: '/things?page=2', headers: { 'x-count': '5' }, payload: { quantity: 3 } })
  t.equal(ok.statusCode, 200, ok.body)
  t.same(ok.json(), { count: 5, page: { page: 2 }, body: { quantity: 3 } }, 'the header and the query as numbers')
  for (const quantity of ['3', true, [3]]) {
    const refused = await app.inject({ method: 'POST', url: '/things?page=2', headers: { 'x-count': '5' }, payload: { quantity } })
    t.equal(refused.statusCode, 400, `quantity ${JSON.stringify(quantity)} refused`)
    t.match(refused.json(), { message: /body\/quantity/ })
  }
  const missing = await app.inject({ method: 'POST', url: '/things?page=2', payload: { quantity: 3 } })
  t.equal(missing.statusCode, 400, 'the required header is required')
  t.match(missing.json(), { message: /headers must have required property 'x-count'/ })
})

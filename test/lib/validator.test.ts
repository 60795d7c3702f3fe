import t from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import { exactBodyValidator, reusingSerializer } from '../../lib/validator.js'

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

t.test('a converted number is finite and within the integers a double holds exactly, whatever the schema bounds', async (t) => {
  const app = await appWithRoute()
  t.teardown(() => app.close())
  for (const value of ['Infinity', '-Infinity', '1e999', '9007199254740993']) {
    const inQuery = await app.inject({ method: 'POST', url: `/things?page=${value}`, headers: { 'x-count': '5' }, payload: { quantity: 3 } })
    t.equal(inQuery.statusCode, 400, `page=${value} refused`)
    t.match(inQuery.json(), { message: 'querystring/page must be a finite number within bounds' })
    const inHeader = await app.inject({ method: 'POST', url: '/things?page=1', headers: { 'x-count': value }, payload: { quantity: 3 } })
    t.equal(inHeader.statusCode, 400, `x-count: ${value} refused`)
  }
  const inBody = await app.inject({ method: 'POST', url: '/things?page=1', headers: { 'x-count': '5', 'content-type': 'application/json' }, payload: '{"quantity":1e999}' })
  t.equal(inBody.statusCode, 400, 'a body\'s 1e999 (Infinity once parsed) refused too')
})

t.test('an app built again in the same process reuses the functions compiled for the same schemas, and compiles new ones', async (t) => {
  const compiledBy = async (maximum: number) => {
    const app = Fastify({ schemaController: { compilersFactory: { buildValidator: exactBodyValidator(), buildSerializer: reusingSerializer() } } })
    t.teardown(() => app.close())
    app.post('/things', {
      schema: { body: Type.Object({ quantity: Type.Integer({ maximum }) }), response: { 200: Type.Object({ quantity: Type.Integer() }) } }
    }, async (request, reply) => {
      compiled.push({ validator: request.getValidationFunction('body'), serializer: reply.getSerializationFunction('200') })
      return request.body
    })
    const compiled: Array<{ validator: unknown, serializer: unknown }> = []
    const ok = await app.inject({ method: 'POST', url: '/things', payload: { quantity: 3 } })
    t.equal(ok.statusCode, 200)
    const refused = await app.inject({ method: 'POST', url: '/things', payload: { quantity: maximum + 1 } })
    t.equal(refused.statusCode, 400, 'each app validates by its own schema')
    return compiled[0]!
  }
  const first = await compiledBy(10)
  const again = await compiledBy(10)
  const other = await compiledBy(20)
  t.equal(again.validator, first.validator, 'the same validator')
  t.equal(again.serializer, first.serializer, 'the same serializer')
  t.not(other.validator, first.validator, 'another schema, another validator')
  t.equal(other.serializer, first.serializer, 'the response schema is the same')
})

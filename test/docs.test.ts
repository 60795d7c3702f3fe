import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildTestApp } from './helpers/app.js'

t.test('/docs/json is a valid OpenAPI 3 document of the health routes', async (t) => {
  const app = await buildTestApp(t)
  const response = await app.inject('/docs/json')
  t.equal(response.statusCode, 200)
  const document = response.json()
  t.match(document.openapi, /^3\./)
  await t.resolves(SwaggerParser.validate(structuredClone(document)), 'passes OpenAPI validation')

  const dereferenced = await SwaggerParser.dereference(structuredClone(document)) as typeof document
  const health = dereferenced.paths['/health'].get
  for (const status of ['200', '503']) {
    const schema = health.responses[status].content['application/json'].schema
    t.same(schema.properties.status.enum ?? schema.properties.status.anyOf.map((s: { enum: string[] }) => s.enum[0]), ['ok', 'degraded'], `/health ${status} documents status`)
    t.ok(schema.properties.checks.properties.database, `/health ${status} documents checks.database`)
  }
  for (const path of ['/health/live', '/health/ready']) {
    t.ok(dereferenced.paths[path]?.get?.responses['200'], `${path} is documented`)
  }
  t.ok(dereferenced.paths['/health/ready'].get.responses['503'], '/health/ready documents its 503')

  const ui = await app.inject('/docs')
  t.ok([200, 302].includes(ui.statusCode), 'the UI is served')
})

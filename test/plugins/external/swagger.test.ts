import t, { type Test } from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { BODY_LIMIT_BYTES } from '../../../schemas/error.js'
import { buildTestApp } from '../../helpers/app.js'

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

interface Operation {
  summary?: string
  tags?: string[]
  security?: Array<Record<string, unknown>>
  parameters?: unknown[]
  requestBody?: unknown
  responses: Record<string, { description: string }>
}

async function operations (t: Test): Promise<Array<{ name: string, operation: Operation }>> {
  const app = await buildTestApp(t)
  const document = (await app.inject('/docs/json')).json() as { paths: Record<string, Record<string, Operation>> }
  return Object.entries(document.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, operation]) => ({ name: `${method.toUpperCase()} ${path}`, operation })))
}

t.test('every operation says what it does and what each of its answers means', async (t) => {
  for (const { name, operation } of await operations(t)) {
    t.ok(operation.summary, `${name} has a summary`)
    t.ok((operation.tags ?? []).length > 0, `${name} has a tag`)
    for (const [status, { description }] of Object.entries(operation.responses)) {
      t.not(description, 'Default Response', `${name} ${status} is described`)
    }
  }
})

t.test('every operation documents the 500 any request can meet', async (t) => {
  for (const { name, operation } of await operations(t)) {
    t.match(operation.responses['500']?.description, /INTERNAL_ERROR/, `${name} documents an unexpected failure`)
  }
})

t.test('the portal API documents every error it can answer', async (t) => {
  const portal = (await operations(t)).filter(({ operation }) => ['auth', 'invoices', 'orders'].some((tag) => operation.tags?.includes(tag)))
  t.ok(portal.length >= 8, 'the sign-in, invoice and order operations')
  for (const { name, operation } of portal) {
    const behindToken = (operation.security ?? []).some((scheme) => 'bearerAuth' in scheme)
    const expected = [
      '429', '500',
      ...(behindToken ? ['401', '503'] : []),
      ...((operation.parameters ?? []).length > 0 || operation.requestBody !== undefined ? ['400'] : []),
      ...(operation.requestBody !== undefined ? ['400', '413', '415'] : [])
    ]
    for (const status of new Set(expected)) t.ok(operation.responses[status], `${name} documents ${status}`)
  }
})

t.test('a bad body gets the answer the document describes', async (t) => {
  const app = await buildTestApp(t)
  const login = ((await app.inject('/docs/json')).json() as { paths: Record<string, Record<string, Operation>> }).paths['/auth/login']!.post!
  const bodies = [
    { status: 400, headers: { 'content-type': 'application/json' }, payload: '{"email":' },
    { status: 400, headers: { 'content-type': 'application/json' }, payload: '{"email":"jane@example.com"}' },
    { status: 413, headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ email: 'x'.repeat(BODY_LIMIT_BYTES), password: 'p' }) },
    { status: 415, headers: { 'content-type': 'application/xml' }, payload: '<login/>' }
  ]
  for (const { status, headers, payload } of bodies) {
    const response = await app.inject({ method: 'POST', url: '/auth/login', headers, payload })
    t.equal(response.statusCode, status, `${headers['content-type']} ${payload.slice(0, 30)}`)
    const { code } = response.json() as { code: string }
    const documented = [...(login.responses[String(status)]?.description ?? '').matchAll(/`([A-Z_]+)(…)?`/g)]
    t.ok(documented.some(([, name, prefix]) => prefix === undefined ? code === name : code.startsWith(name!)), `${code} is among the codes documented for ${status}`)
  }
})

import t, { type Test } from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { BODY_LIMIT_BYTES } from '../../../schemas/error.js'
import { buildTestApp } from '../../helpers/app.js'
import { bearer, login } from '../../helpers/tokens.js'

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
  operationId?: string
  summary?: string
  tags?: string[]
  security?: Array<Record<string, unknown>>
  parameters?: Parameter[]
  requestBody?: { content: Record<string, MediaType> }
  responses: Record<string, { description: string, content?: Record<string, MediaType> }>
}

interface Parameter { name: string, in: string, required?: boolean, schema: { default?: unknown } }
interface MediaType { schema: { $ref?: string, example?: unknown }, example?: unknown }

interface Document {
  servers?: Array<{ url: string, description?: string }>
  tags?: Array<{ name: string, description?: string }>
  paths: Record<string, Record<string, Operation>>
  components: { schemas: Record<string, { example?: unknown }>, securitySchemes: Record<string, { type: string, scheme?: string }> }
}

async function documentOf (t: Test): Promise<Document> {
  const app = await buildTestApp(t)
  return (await app.inject('/docs/json')).json()
}

function operationsOf (document: Document): Array<{ name: string, operation: Operation }> {
  return Object.entries(document.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, operation]) => ({ name: `${method.toUpperCase()} ${path}`, operation })))
}

async function operations (t: Test): Promise<Array<{ name: string, operation: Operation }>> {
  return operationsOf(await documentOf(t))
}

/** The portal API's tags, first in the document, and the operator endpoints' after them. */
const PORTAL_TAGS = ['auth', 'invoices', 'orders', 'events']
const OPERATOR_TAGS = ['health', 'alerts', 'metrics', 'status', 'events-parked']

/** A generated client names its functions after these: changing one breaks the front end's code. */
const OPERATION_IDS = {
  'POST /auth/login': 'signIn',
  'POST /auth/session': 'startSession',
  'GET /auth/sign-in-methods': 'getSignInMethods',
  'GET /auth/session': 'getSession',
  'POST /auth/logout': 'signOut',
  'POST /auth/logout-all': 'signOutEverywhere',
  'GET /api/invoices': 'listInvoices',
  'GET /api/invoices/{id}': 'getInvoice',
  'POST /api/orders': 'placeOrder',
  'GET /api/orders': 'listOrders',
  'GET /api/orders/{id}': 'getOrder',
  'GET /api/events': 'streamEvents',
  'GET /health': 'getHealth',
  'GET /health/live': 'getLiveness',
  'GET /health/ready': 'getReadiness',
  'GET /health/queues': 'getQueues',
  'GET /health/queues/billing': 'getBillingQueue',
  'GET /health/queues/crm': 'getCrmQueue',
  'GET /api/health/services/cache': 'getServicesCache',
  'GET /auth/health-check': 'getIntegrationHealth',
  'GET /health/events/parked': 'listParkedEvents',
  'POST /health/events/parked/{id}/retry': 'retryParkedEvent',
  'DELETE /health/events/parked/{id}': 'discardParkedEvent',
  'GET /health/alerts': 'getAlerts',
  'GET /metrics': 'getMetrics',
  'GET /status/summary': 'getStatusSummary'
}

t.test('every operation has its own stable operationId', async (t) => {
  const all = await operations(t)
  t.same(Object.fromEntries(all.map(({ name, operation }) => [name, operation.operationId])), OPERATION_IDS, 'each operation is named as the client expects')
  const ids = all.map(({ operation }) => operation.operationId)
  t.equal(new Set(ids).size, ids.length, 'no two operations share an id')
})

t.test('query parameters with a default are optional, the default documented', async (t) => {
  const document = await documentOf(t)
  for (const path of ['/api/invoices', '/api/orders']) {
    const query = Object.fromEntries((document.paths[path]!.get!.parameters ?? []).filter((parameter) => parameter.in === 'query').map((parameter) => [parameter.name, parameter]))
    t.match(query, { page: { required: false, schema: { default: 1 } }, limit: { required: false, schema: { default: 25 } } }, `GET ${path}: page and limit may be left out`)
  }
  for (const { name, operation } of operationsOf(document)) {
    for (const parameter of operation.parameters ?? []) {
      if (parameter.schema.default !== undefined) t.not(parameter.required, true, `${name} ${parameter.name} has a default, so it is not required`)
    }
  }
})

t.test('servers and security: public operations say so, the others name the token they take', async (t) => {
  const app = await buildTestApp(t)
  const document = (await app.inject('/docs/json')).json() as Document
  t.equal(document.servers?.length, 1, 'one server')
  t.match(document.servers?.[0], { url: '/', description: String }, 'relative to the document: the instance that serves it')

  const bySecurity = (operation: Operation) => operation.security === undefined ? 'undeclared' : operation.security.length === 0 ? 'public' : Object.keys(Object.assign({}, ...operation.security)).sort().join(',')
  const groups: Record<string, string[]> = {}
  for (const { name, operation } of operationsOf(document)) (groups[bySecurity(operation)] ??= []).push(name)
  t.same(groups, {
    public: ['GET /health', 'GET /health/live', 'GET /health/ready', 'GET /health/queues', 'GET /health/queues/billing', 'GET /health/queues/crm', 'GET /api/health/services/cache', 'GET /auth/health-check', 'POST /auth/login', 'POST /auth/session', 'GET /auth/sign-in-methods'],
    sessionCookie: ['GET /auth/session'],
    opsToken: ['GET /health/events/parked', 'POST /health/events/parked/{id}/retry', 'DELETE /health/events/parked/{id}', 'GET /health/alerts', 'GET /metrics', 'GET /status/summary'],
    'bearerAuth,sessionCookie': ['POST /auth/logout', 'POST /auth/logout-all', 'GET /api/invoices', 'GET /api/invoices/{id}', 'POST /api/orders', 'GET /api/orders', 'GET /api/orders/{id}', 'GET /api/events']
  }, 'every operation declares its security: none, the operations token, the session cookie, or the access token or the cookie')
  t.match(document.components.securitySchemes.sessionCookie, { type: 'apiKey', in: 'cookie', name: '__Host-portal-session', description: String }, 'the cookie the browser sends')

  // What Authorize in /docs sends for an HTTP bearer scheme, with the token POST /auth/login answers.
  t.match(document.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer' })
  const token = await login(app)
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200, 'the sign-in token is accepted as the scheme sends it')
  t.equal((await app.inject({ url: '/api/invoices' })).statusCode, 401, 'and needed')
})

t.test('tags: the portal API first, the operator endpoints after, each described; every operation tagged', async (t) => {
  const document = await documentOf(t)
  t.same(document.tags?.map(({ name }) => name), [...PORTAL_TAGS, ...OPERATOR_TAGS], 'in the order /docs shows them')
  for (const tag of document.tags ?? []) t.ok(tag.description, `${tag.name} is described`)
  for (const { name, operation } of operationsOf(document)) {
    t.equal(operation.tags?.length, 1, `${name} has one tag`)
    t.ok(document.tags?.some((tag) => tag.name === operation.tags?.[0]), `${name}'s tag is declared`)
  }
})

t.test('every request and response body of the portal API has an example', async (t) => {
  const document = await documentOf(t)
  const exampleOf = (media: MediaType) => media.example ?? (media.schema.$ref === undefined ? media.schema.example : document.components.schemas[media.schema.$ref.split('/').at(-1)!]?.example)
  const portal = operationsOf(document).filter(({ operation }) => PORTAL_TAGS.includes(operation.tags?.[0] ?? ''))
  t.equal(portal.length, 12, 'the sign-in, sign-in methods, session, invoice, order and event operations')
  for (const { name, operation } of portal) {
    for (const [type, media] of Object.entries(operation.requestBody?.content ?? {})) t.ok(exampleOf(media), `${name} ${type} request`)
    for (const [status, response] of Object.entries(operation.responses)) {
      for (const [type, media] of Object.entries(response.content ?? {})) t.ok(exampleOf(media), `${name} ${status} ${type}`)
    }
  }
})

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
  const portal = (await operations(t)).filter(({ operation }) => PORTAL_TAGS.some((tag) => operation.tags?.includes(tag)))
  t.ok(portal.length >= 8, 'the sign-in, invoice and order operations')
  for (const { name, operation } of portal) {
    const behindToken = (operation.security ?? []).some((scheme) => 'bearerAuth' in scheme || 'sessionCookie' in scheme)
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
  const signIn = ((await app.inject('/docs/json')).json() as Document).paths['/auth/login']!.post!
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
    const documented = [...(signIn.responses[String(status)]?.description ?? '').matchAll(/`([A-Z_]+)(…)?`/g)]
    t.ok(documented.some(([, name, prefix]) => prefix === undefined ? code === name : code.startsWith(name!)), `${code} is among the codes documented for ${status}`)
  }
})

t.test('a nullable enum lists null, as OpenAPI 3.0 wants: a client validating the answers takes the null the service sends', async (t) => {
  const app = await buildTestApp(t)
  const found: unknown[][] = []
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(visit)
    if (typeof value !== 'object' || value === null) return
    const { nullable, enum: members } = value as { nullable?: boolean, enum?: unknown[] }
    if (nullable === true && Array.isArray(members)) found.push(members)
    Object.values(value).forEach(visit)
  }
  visit((await app.inject('/docs/json')).json())
  t.ok(found.length >= 1, `${found.length} nullable enums`)
  t.ok(found.every((members) => members.includes(null)), 'each lists null')
  const alerts = (await app.inject('/docs/json')).json().components.schemas.Alert.properties.priority
  t.same(alerts.enum, ['P1', 'P2', 'P3', 'P4', null], 'the priority of an alert, null while ok')
})

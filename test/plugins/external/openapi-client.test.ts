import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import t, { type Test } from 'tap'
import ts from 'typescript'
import openapiTS, { astToString } from 'openapi-typescript'
import { createConfig, lintFromString, type NormalizedProblem } from '@redocly/openapi-core'
import type { FastifyInstance, InjectOptions } from 'fastify'
import { projectRoot } from '../../../lib/project-root.js'
import { buildTestApp } from '../../helpers/app.js'

async function documentOf (app: FastifyInstance): Promise<string> {
  const response = await app.inject('/docs/json')
  if (response.statusCode !== 200) throw new Error(`/docs/json answered ${response.statusCode}`)
  return response.body
}

/**
 * A folder under the project's node_modules, so that the client compiles and runs against the
 * project's own openapi-fetch, as an application's would, without path mappings; removed at the end.
 */
async function clientDir (t: Test): Promise<string> {
  const cache = join(projectRoot, 'node_modules', '.cache')
  await mkdir(cache, { recursive: true })
  const dir = await mkdtemp(join(cache, 'openapi-client-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** What a portal front end does first, typed by the generated `paths` alone. */
const CLIENT = `import createClient from 'openapi-fetch'
import type { paths } from './portal-api.js'

type OrderStatus = 'Pending Review' | 'Provisioning' | 'Active' | 'Failed' | 'Cancelled'

export async function portalJourney (baseUrl: string, fetch: (request: Request) => Promise<Response>, email: string, password: string) {
  const portal = createClient<paths>({ baseUrl, fetch })
  const signedIn = await portal.POST('/auth/login', { body: { email, password } })
  if (signedIn.error) throw new Error('sign-in refused: ' + signedIn.error.code)
  const headers = { authorization: signedIn.data.tokenType + ' ' + signedIn.data.accessToken }

  const invoices = await portal.GET('/api/invoices', { headers })
  if (invoices.error) throw new Error('invoices refused: ' + invoices.error.code)
  const firstTotal: number | undefined = invoices.data.invoices[0]?.total

  const placed = await portal.POST('/api/orders', { headers, body: { productId: 1, billingCycle: 'monthly' } })
  if (placed.error) throw new Error('order refused: ' + placed.error.code)

  const order = await portal.GET('/api/orders/{id}', { headers, params: { path: { id: placed.data.id } } })
  if (order.error) throw new Error('order not read: ' + order.error.code)
  const status: OrderStatus = order.data.status

  return { page: invoices.data.page, limit: invoices.data.limit, invoiceCount: invoices.data.invoices.length, firstTotal, placed: placed.data, order: order.data, status }
}
`

/** Uses of the API the generated types must refuse, each a file of its own, and what the compiler says. */
const MISUSES: Record<string, { statement: string, refusal: RegExp }> = {
  'wrong-billing-cycle': {
    statement: "await portal.POST('/api/orders', { body: { productId: 1, billingCycle: 'weekly' } })",
    refusal: /'"weekly"' is not assignable/
  },
  'sign-in-without-password': {
    statement: "await portal.POST('/auth/login', { body: { email: 'jane@example.com' } })",
    refusal: /Property 'password' is missing/
  },
  'page-as-text': {
    statement: "await portal.GET('/api/invoices', { params: { query: { page: 'first' } } })",
    refusal: /'string' is not assignable to type 'number'/
  },
  'unknown-order-field': {
    statement: "const { data } = await portal.GET('/api/orders/{id}', { params: { path: { id: 'x' } } }); export const price: number | undefined = data?.price",
    refusal: /Property 'price' does not exist/
  }
}

const misuse = (statement: string) => `import createClient from 'openapi-fetch'
import type { paths } from './portal-api.js'

const portal = createClient<paths>({ baseUrl: '/' })
${statement}
`

/** A front end's compiler: strict, for the browser (DOM types, no Node's). */
const COMPILER_OPTIONS: ts.CompilerOptions = {
  strict: true,
  noUncheckedIndexedAccess: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
  types: [],
  // Libraries' declarations only: the generated types are a .ts file, so they are checked.
  skipLibCheck: true
}

function format (diagnostic: ts.Diagnostic): string {
  return ts.formatDiagnostic(diagnostic, { getCanonicalFileName: (name) => name, getCurrentDirectory: () => projectRoot, getNewLine: () => '\n' })
}

/** openapi-fetch's `fetch`, answered by app.inject: the client's requests reach the app without a socket. */
function injectingFetch (app: FastifyInstance) {
  return async (request: Request): Promise<Response> => {
    const url = new URL(request.url)
    const body = await request.arrayBuffer()
    const response = await app.inject({
      method: request.method as InjectOptions['method'],
      url: url.pathname + url.search,
      headers: Object.fromEntries(request.headers),
      ...(body.byteLength > 0 && { payload: Buffer.from(body) })
    })
    const headers = Object.entries(response.headers).map(([name, value]): [string, string] => [name, String(value)])
    return new Response(response.rawPayload.length > 0 ? response.rawPayload : null, { status: response.statusCode, headers })
  }
}

interface Journey {
  page: number
  limit: number
  invoiceCount: number
  firstTotal: number | undefined
  placed: { id: string, status: string }
  order: { id: string, status: string }
  status: string
}

t.test('a client generated from /docs/json type-checks, refuses misuse and runs the portal journey', async (t) => {
  const app = await buildTestApp(t)
  const types = astToString(await openapiTS(await documentOf(app)))
  const dir = await clientDir(t)
  await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
  await writeFile(join(dir, 'portal-api.ts'), types)
  await writeFile(join(dir, 'client.ts'), CLIENT)
  for (const [name, { statement }] of Object.entries(MISUSES)) await writeFile(join(dir, `${name}.ts`), misuse(statement))

  const clientFile = join(dir, 'client.ts')
  const program = ts.createProgram([clientFile, ...Object.keys(MISUSES).map((name) => join(dir, `${name}.ts`))], { ...COMPILER_OPTIONS, outDir: dir })
  const diagnosticsOf = (file: string) => ts.getPreEmitDiagnostics(program, program.getSourceFile(file)).filter((diagnostic) => diagnostic.file?.fileName === file || diagnostic.file === undefined)

  t.same(diagnosticsOf(join(dir, 'portal-api.ts')).map(format), [], 'the generated types compile')
  t.same(diagnosticsOf(clientFile).map(format), [], 'the client compiles: sign-in, invoices without page or limit, an order placed and read')
  for (const [name, { refusal }] of Object.entries(MISUSES)) {
    t.match(diagnosticsOf(join(dir, `${name}.ts`)).map(format), [refusal], `${name} is a type error`)
  }

  const emitted = program.emit(program.getSourceFile(clientFile))
  t.notOk(emitted.emitSkipped, 'the client is compiled')
  const { portalJourney } = await import(pathToFileURL(join(dir, 'client.js')).href) as {
    portalJourney: (baseUrl: string, fetch: (request: Request) => Promise<Response>, email: string, password: string) => Promise<Journey>
  }
  const journey = await portalJourney('http://portal-bff.test', injectingFetch(app), 'jane@example.com', 'correct-horse')
  t.match(journey, { page: 1, limit: 25, firstTotal: Number, placed: { status: 'Pending Review' }, status: 'Pending Review' }, 'page and limit left out are the first page of 25')
  t.ok(journey.invoiceCount > 0, 'the client\'s invoices')
  t.same(journey.order, journey.placed, 'the order reads back as placed')
})

function describe (problem: NormalizedProblem): string {
  return `${problem.ruleId}: ${problem.message} (${problem.location[0]?.pointer ?? 'document'})`
}

t.test('redocly lint with the recommended rules finds no error in /docs/json, and every example fits its schema', async (t) => {
  const app = await buildTestApp(t)
  const source = await documentOf(app)
  const recommended = await lintFromString({ source, absoluteRef: 'docs.json', config: await createConfig({ extends: ['recommended'] }) })
  t.same(recommended.filter((problem) => problem.severity === 'error').map(describe), [], 'no error')

  // The recommended rules only warn about an example that contradicts its schema: here it is an error.
  const examples = await lintFromString({
    source,
    absoluteRef: 'docs.json',
    config: await createConfig({ rules: { 'no-invalid-schema-examples': 'error', 'no-invalid-media-type-examples': 'error' } })
  })
  t.same(examples.map(describe), [], 'every example is valid')
})

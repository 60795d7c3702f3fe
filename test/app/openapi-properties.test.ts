import t from 'tap'
import fc from 'fast-check'
import { randomUUID } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, scopeWith } from '../helpers/app.js'
import { bearer, login } from '../helpers/tokens.js'
import { JANE, startSession } from '../helpers/sessions.js'
import { documentOf, documentValidators, type Operation, type Parameter, type Schema, type Validate } from '../helpers/openapi.js'
import { HOSTILE_TEXT, SchemaArbitraries } from '../helpers/schema-arbitraries.js'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'

/*
 * The whole API tried from its own OpenAPI document, as a client generating requests from it would:
 * every operation with parameters, bodies and headers the document accepts and ones it refuses, as a
 * bearer client, as a cookie session and without credentials. Every answer must be one the operation
 * documents, in its documented content type and schema; none is a 5xx; input the document refuses is
 * refused with a 4xx, and input it accepts is never refused as invalid (400).
 * A few runs an operation in `npm test`; `npm run test:properties` runs many (PROPERTY_RUNS).
 */
const RUNS = Number(process.env.PROPERTY_RUNS ?? 8)
/**
 * A failed run again: PROPERTY_REPLAY holds the braces its report prints (`{ …: -1293436848, path: "0",
 * endOnFailure: true }`), read as fast-check's parameters.
 */
const REPLAY = Object.fromEntries([...(process.env.PROPERTY_REPLAY ?? '').matchAll(/(\w+): ("[^"]*"|-?\d+|true|false)/g)]
  .map(([, name, value]) => [name, JSON.parse(value!) as unknown]))

type Auth = 'bearer' | 'cookie' | 'none'
interface Case {
  valid: boolean
  auth: Auth
  parameters: Record<string, string | undefined>
  body?: { json: unknown } | { text: string }
}
interface Answer { status: number, contentType: string, body: string }

const NUMERIC_HOSTILE = ['Infinity', '-Infinity', 'NaN', '1e999', '1e400', '-1e400', '1234567890123456789012345', '-1', '0', '1.5', 'abc', '']
const INTEGER_TEXT = /^-?(?:0|[1-9][0-9]*)$/

class Cases {
  readonly #arbitraries: SchemaArbitraries
  readonly #validators = new Map<Schema, Validate>()
  readonly #compile: (schema: Schema) => Validate

  constructor (readonly document: ReturnType<typeof documentOf>) {
    this.#arbitraries = new SchemaArbitraries(document)
    this.#compile = documentValidators(document)
  }

  validator (schema: Schema): Validate {
    let validate = this.#validators.get(schema)
    if (validate === undefined) this.#validators.set(schema, validate = this.#compile(schema))
    return validate
  }

  /** Whether the document accepts `text` as the parameter: an integer is written in digits, as a client writes one. */
  accepts (parameter: Parameter, text: string): boolean {
    const schema = this.#arbitraries.resolve(parameter.schema)
    const sent = parameter.in === 'header' ? text.trim() : text
    if (sent === '') return parameter.in === 'header' && parameter.required !== true
    if (schema.type === 'integer') return INTEGER_TEXT.test(sent) && Number.isSafeInteger(Number(sent)) && this.validator(schema)(Number(sent))
    return this.validator(schema)(sent)
  }

  of (operation: Operation): fc.Arbitrary<Case> {
    const parameters = (operation.parameters ?? []).filter((parameter) => parameter.in !== 'cookie')
    // A header carries visible ASCII: HTTP clients refuse to send anything else.
    const sendable = (parameter: Parameter, text: string) => parameter.in !== 'header' || /^[\x20-\x7e]*$/.test(text)
    const validText = (parameter: Parameter) => this.#arbitraries.valid(parameter.schema).map(String).filter((text) => sendable(parameter, text) && this.accepts(parameter, text))
    const validParameters = fc.record(Object.fromEntries(parameters.map((parameter) =>
      [parameter.name, parameter.required === true ? validText(parameter) : fc.option(validText(parameter), { nil: undefined })])))
    const bodySchema = operation.requestBody?.content['application/json']?.schema
    const validBody = bodySchema === undefined ? fc.constant(undefined) : this.#validBody(bodySchema).map((json) => ({ json }))
    const secured = (operation.security ?? []).length > 0 && operation.security!.some((scheme) => 'bearerAuth' in scheme || 'sessionCookie' in scheme)
    const auth = secured ? fc.constantFrom<Auth>('bearer', 'bearer', 'cookie', 'cookie', 'none') : fc.constant<Auth>('none')
    const valid = fc.record({ valid: fc.constant(true), auth, parameters: validParameters, body: validBody }) as fc.Arbitrary<Case>

    const spoiled: Array<fc.Arbitrary<Case>> = parameters.map((parameter) => fc.tuple(valid, this.#invalidText(parameter))
      .map(([base, text]) => ({ ...base, valid: false, parameters: { ...base.parameters, [parameter.name]: text } })))
    if (bodySchema !== undefined) {
      const validate = this.validator(bodySchema)
      const invalidJson = this.#arbitraries.invalid(bodySchema).filter((json) => !validate(json)).map((json) => ({ json }))
      const malformed = fc.constantFrom('{"', 'not json', '{"a":1}}', '').map((text) => ({ text }))
      spoiled.push(fc.tuple(valid, fc.oneof({ weight: 4, arbitrary: invalidJson }, { weight: 1, arbitrary: malformed }))
        .map(([base, body]) => ({ ...base, valid: false, body })))
    }
    return spoiled.length === 0 ? valid : fc.oneof(valid, ...spoiled)
  }

  #validBody (schema: Schema): fc.Arbitrary<unknown> {
    const generated = this.#arbitraries.valid(schema)
    // Sign-in bodies: now and then an account that exists, so that success is tried too.
    return this.#arbitraries.resolve(schema).properties !== undefined && 'password' in (this.#arbitraries.resolve(schema).properties as object)
      ? fc.oneof({ weight: 3, arbitrary: generated }, { weight: 1, arbitrary: fc.constant(JANE) })
      : generated
  }

  #invalidText (parameter: Parameter): fc.Arbitrary<string> {
    const schema = this.#arbitraries.resolve(parameter.schema)
    const numeric = schema.type === 'integer' || schema.type === 'number'
    // A path parameter left empty or with a slash is another path, not this operation's.
    const texts = (numeric ? NUMERIC_HOSTILE : HOSTILE_TEXT).filter((text) => parameter.in !== 'path' || (text.trim() !== '' && !text.includes('/')))
    return fc.constantFrom(...texts).filter((text) => !this.accepts(parameter, text))
  }
}

interface Credentials { bearer: Record<string, string>, cookie: Record<string, string> }

/** GET /api/events over a socket: a stream never ends, so its answer is its status and headers. */
function overSocket (address: string, url: string, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${address}${url}`, { headers }, (response) => {
      const contentType = String(response.headers['content-type'] ?? '')
      if (contentType.startsWith('text/event-stream')) {
        request.destroy()
        resolve({ status: response.statusCode ?? 0, contentType, body: '' })
        return
      }
      let body = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => { body += chunk })
      response.on('end', () => resolve({ status: response.statusCode ?? 0, contentType, body }))
    })
    request.on('error', reject)
    request.end()
  })
}

t.test('every operation of the OpenAPI document, tried with generated input: no 5xx, documented answers, invalid input refused', async (t) => {
  const app: FastifyInstance = await buildTestApp(t, { RATE_LIMIT_MAX: '1000000', LOGIN_RATE_LIMIT_MAX: '1000000', TOKEN_FAILURES_MAX: '1000000', SSE_MAX_STREAMS_PER_USER: '100' })
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const cases = new Cases(documentOf(app))
  const shared: Credentials = { bearer: bearer(await login(app)), cookie: (await startSession(app)).cookie }
  // Signing out ends what it is given: those operations get credentials of their own each time, of another client.
  const ownCredentials = async (): Promise<Credentials> => ({
    bearer: bearer(await app.jwt.sign({ sub: '2', jti: randomUUID() })),
    cookie: { cookie: `${SESSION_COOKIE}=${(await scopeWith(app, 'sessions').sessions.start(2, { signIn: 'password', name: null, email: null })).cookie}` }
  })

  const operations = Object.entries(cases.document.paths).flatMap(([path, byMethod]) => Object.entries(byMethod).map(([method, operation]) => ({ path, method: method.toUpperCase(), operation })))
  t.ok(operations.length >= 25, `${operations.length} operations`)
  for (const { path, method, operation } of operations) {
    const endsCredentials = /^signOut/.test(operation.operationId ?? '')
    const ask = async (item: Case): Promise<{ url: string, answer: Answer }> => {
      const parameters = (operation.parameters ?? []).filter((parameter) => item.parameters[parameter.name] !== undefined)
      const credentials = endsCredentials ? await ownCredentials() : shared
      const headers: Record<string, string> = {
        ...item.auth === 'none' ? {} : credentials[item.auth],
        ...item.auth === 'cookie' && method !== 'GET' ? { 'x-csrf': '1' } : {},
        ...Object.fromEntries(parameters.filter((parameter) => parameter.in === 'header').map((parameter) => [parameter.name, item.parameters[parameter.name]!]))
      }
      let url = path
      for (const parameter of parameters.filter((parameter) => parameter.in === 'path')) url = url.replace(`{${parameter.name}}`, encodeURIComponent(item.parameters[parameter.name]!))
      const query = new URLSearchParams(parameters.filter((parameter) => parameter.in === 'query').map((parameter): [string, string] => [parameter.name, item.parameters[parameter.name]!])).toString()
      if (query !== '') url += `?${query}`
      if (operation.operationId === 'streamEvents') return { url, answer: await overSocket(address, url, headers) }
      const payload = item.body === undefined ? undefined : 'json' in item.body ? JSON.stringify(item.body.json) : item.body.text
      if (payload !== undefined) headers['content-type'] = 'application/json'
      const response = await app.inject({ method: method as 'GET', url, headers, ...(payload !== undefined && { payload }) })
      return { url, answer: { status: response.statusCode, contentType: String(response.headers['content-type'] ?? ''), body: response.body } }
    }

    const seen = new Map<string, number>()
    const property = fc.asyncProperty(cases.of(operation), async (item) => {
      const { url, answer } = await ask(item)
      const kind = `${item.valid ? 'valid' : 'invalid'} ${item.auth} ${answer.status}`
      seen.set(kind, (seen.get(kind) ?? 0) + 1)
      const what = `${method} ${url} (${item.auth}, ${item.valid ? 'valid' : 'invalid'} input${item.body === undefined ? '' : `, body ${JSON.stringify(item.body).slice(0, 120)}`}) answered ${answer.status} ${answer.body.slice(0, 200)}`
      if (answer.status >= 500) throw new Error(`a 5xx: ${what}`)
      const documented = operation.responses[String(answer.status)]
      if (documented === undefined) throw new Error(`a status the operation does not document: ${what}`)
      if (!item.valid && (answer.status < 400 || answer.status >= 500)) throw new Error(`input the document refuses was not refused: ${what}`)
      if (item.valid && item.auth !== 'none' && answer.status === 400) throw new Error(`input the document accepts was refused: ${what}`)
      const mediaType = answer.contentType.split(';')[0]!.trim()
      if (documented.content === undefined) {
        if (answer.body !== '') throw new Error(`a body where the document says none: ${what}`)
        return
      }
      const media = documented.content[mediaType]
      if (media === undefined) throw new Error(`content type ${mediaType} where the document says ${Object.keys(documented.content).join(', ')}: ${what}`)
      if (mediaType !== 'application/json') return
      const validate = cases.validator(media.schema)
      if (!validate(JSON.parse(answer.body))) throw new Error(`a body its schema refuses (${JSON.stringify(validate.errors)}): ${what}`)
    })
    await t.resolves(fc.assert(property, { numRuns: RUNS, endOnFailure: true, includeErrorInReport: true, ...REPLAY }), `${method} ${path}`)
    t.comment(`${method} ${path}: ${[...seen].sort().map(([kind, count]) => `${kind} x${count}`).join(', ')}`)
  }
})

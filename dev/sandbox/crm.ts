import { createPublicKey, generateKeyPairSync, randomBytes, verify } from 'node:crypto'
import type { KeyObject } from 'node:crypto'
import { caseSafeId } from '../../integrations/crm/salesforce-id.js'
import { StreamingApi, bayeuxMessages } from './crm-streaming.js'
import type { PlatformEventMessage, StreamingOptions, StreamingStats } from './crm-streaming.js'
import { SandboxControlError, Simulator, bearerToken, controlBody, emptyReply, firstIdOfRun, jsonReply } from './simulator.js'
import type { Endpoint, Fault, IncomingCall, Reply, SimulatorOptions } from './simulator.js'

export { ORDER_PROVISION_CHANNEL } from './crm-streaming.js'
export type { PlatformEventMessage, StreamingOptions, StreamingStats } from './crm-streaming.js'

const JWT_BEARER_GRANT = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
/** Salesforce wants `exp` within three minutes; a little clock skew is tolerated. */
const MAX_ASSERTION_LIFETIME_S = 180 + 60

const WRITABLE_ORDER_FIELDS = [
  'Status', 'AccountId', 'EffectiveDate', 'Name', 'Description', 'Type', 'Pricebook2Id',
  'BillingOrderId__c', 'BillingClientId__c', 'Product__c', 'Provisioning_Error__c'
] as const
const READ_ONLY_ORDER_FIELDS = ['Id', 'OrderNumber', 'CreatedDate', 'CreatedById', 'LastModifiedDate'] as const
export type OrderField = typeof WRITABLE_ORDER_FIELDS[number] | typeof READ_ONLY_ORDER_FIELDS[number]
export type OrderRecord = Record<OrderField, string | number | boolean | null>
export type OrderFields = Partial<Record<typeof WRITABLE_ORDER_FIELDS[number], string | number | boolean | null>>

/** Field names are case-insensitive in the REST API, as in SOQL. */
const ORDER_FIELD_BY_LOWER_NAME = new Map<string, OrderField>(
  [...WRITABLE_ORDER_FIELDS, ...READ_ONLY_ORDER_FIELDS].map(field => [field.toLowerCase(), field])
)
const READ_ONLY = new Set<string>(READ_ONLY_ORDER_FIELDS)

export interface CrmSimulatorOptions extends SimulatorOptions {
  /** The connected app's consumer key: the assertion's `iss`. */
  clientId?: string
  /** The integration user: the assertion's `sub`. */
  username?: string
  /** PEM of the RSA key that signs assertions; a new 2048-bit pair is made when absent. */
  privateKey?: string
  apiUsage?: { used?: number, max?: number }
  /** Access tokens stop working after this long (the org's session timeout). */
  sessionTimeoutMs?: number
  streaming?: StreamingOptions
  orders?: OrderFields[]
}

export interface ApiUsage {
  used: number
  max: number
}

type OAuthFailure = { error: string, description: string }

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

function salesforceId (keyPrefix: string, sequence: number): string {
  let digits = ''
  for (let rest = sequence; rest > 0; rest = Math.floor(rest / 62)) digits = BASE62[rest % 62] + digits
  return caseSafeId(`${keyPrefix}5g0${digits.padStart(9, '0')}`)
}

function salesforceDateTime (date = new Date()): string {
  return date.toISOString().replace('Z', '+0000')
}

function decodeJwtPart (part: string | undefined): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(part ?? '', 'base64url').toString('utf8'))
    return typeof value === 'object' && value !== null ? value as Record<string, unknown> : undefined
  } catch {
    return undefined
  }
}

function restError (errorCode: string, message: string, fields: Record<string, unknown> = {}): Array<Record<string, unknown>> {
  return [{ message, errorCode, ...fields }]
}

/** A control body of Order fields, every one writable. */
function writableFields (fields: Record<string, unknown>): OrderFields {
  const unknown = Object.keys(fields).filter(field => !(WRITABLE_ORDER_FIELDS as readonly string[]).includes(field))
  if (unknown.length > 0) throw new SandboxControlError(`not writable Order fields: ${unknown.join(', ')}`)
  return fields as OrderFields
}

function parseJson (body: Buffer): { value: unknown } | { error: string } {
  try {
    return { value: JSON.parse(body.toString('utf8')) }
  } catch (error) {
    return { error: (error as Error).message }
  }
}

/**
 * Salesforce: the OAuth 2.0 JWT bearer token endpoint, the REST API for the `Order` sObject with the
 * org's daily API quota, and the Streaming API for the `OrderProvisionRequested__e` platform event.
 * One server plays both the login host and the instance.
 */
let sandboxKey: string | undefined

/**
 * The connected app's private key (PEM), made once per process: an RSA key costs 0.1-0.3 s of CPU,
 * and a process that starts many sandboxes (the tests) needs no new one for each.
 */
function connectedAppKey (): string {
  sandboxKey ??= generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' }
  }).privateKey
  return sandboxKey
}

export class CrmSimulator extends Simulator {
  readonly clientId: string
  readonly username: string
  readonly privateKey: string
  readonly orgId = salesforceId('00D', 1_048_576)
  readonly userId = salesforceId('005', 2_097_152)
  readonly sessionTimeoutMs: number
  #publicKey: KeyObject
  #tokens = new Map<string, number>()
  #usage: ApiUsage
  #orders = new Map<string, OrderRecord>()
  #orderSequence = 0
  readonly #firstOrderId = firstIdOfRun()
  #streaming: StreamingApi

  constructor (options: CrmSimulatorOptions = {}) {
    super(options)
    this.clientId = options.clientId ?? '3MVG9sandbox.PortalBff.ConnectedApp.ConsumerKey'
    this.username = options.username ?? 'integration@portal-bff.sandbox'
    this.privateKey = options.privateKey ?? connectedAppKey()
    this.#publicKey = createPublicKey(this.privateKey)
    this.sessionTimeoutMs = options.sessionTimeoutMs ?? 2 * 60 * 60 * 1000
    this.#usage = { used: options.apiUsage?.used ?? 0, max: options.apiUsage?.max ?? 15_000 }
    this.#streaming = new StreamingApi(token => this.#tokenIsValid(token), options.streaming)
    for (const fields of options.orders ?? []) this.putOrder(fields)
  }

  get loginUrl (): string {
    return this.url
  }

  get instanceUrl (): string {
    return this.url
  }

  get apiUsage (): ApiUsage {
    return { ...this.#usage }
  }

  setApiUsage (usage: Partial<ApiUsage>): void {
    this.#usage = { used: usage.used ?? this.#usage.used, max: usage.max ?? this.#usage.max }
  }

  /** Every access token stops working, as when an admin revokes the sessions; held streaming connects get 401. */
  expireAccessTokens (): void {
    this.#tokens.clear()
    this.#streaming.rejectHeldConnects()
  }

  get orders (): readonly OrderRecord[] {
    return [...this.#orders.values()].map(order => ({ ...order }))
  }

  order (id: string): OrderRecord | undefined {
    const order = this.#orders.get(caseSafeId(id))
    return order === undefined ? undefined : { ...order }
  }

  /** Stores an Order as if created in the org, without counting an API call; returns its id. */
  putOrder (fields: OrderFields): string {
    const id = salesforceId('801', this.#firstOrderId + ++this.#orderSequence)
    const now = salesforceDateTime()
    const record = Object.fromEntries([...WRITABLE_ORDER_FIELDS].map(field => [field, null])) as OrderRecord
    Object.assign(record, fields, {
      Id: id,
      OrderNumber: String(100 + this.#orderSequence).padStart(8, '0'),
      CreatedDate: now,
      CreatedById: this.userId,
      LastModifiedDate: now
    })
    this.#orders.set(id, record)
    return id
  }

  /**
   * Changes an order as someone in the org would (approving, rejecting or cancelling it: `Status`),
   * without counting an API call and without raising any event; false when there is no such order.
   */
  updateOrder (id: string, fields: OrderFields): boolean {
    const order = this.#orders.get(caseSafeId(id))
    if (order === undefined) return false
    Object.assign(order, fields, { LastModifiedDate: salesforceDateTime() })
    return true
  }

  /** Keeps events from the connected subscribers (they stay connected); a new subscription replays them. */
  muteEventDelivery (muted: boolean): void {
    this.#streaming.muteDelivery(muted)
  }

  publishOrderProvisionRequested (orderId: string): number {
    return this.#streaming.publish({ OrderId__c: orderId, CreatedDate: new Date().toISOString(), CreatedById: this.userId })
  }

  /** An OrderProvisionRequested__e as API versions before 52.0 deliver it, without EventUuid. */
  publishOrderProvisionRequestedWithoutUuid (orderId: string): number {
    return this.#streaming.publishWithoutUuid({ OrderId__c: orderId, CreatedDate: new Date().toISOString(), CreatedById: this.userId })
  }

  /** An OrderProvisionRequested__e without its payload. */
  publishMalformedEvent (): number {
    return this.#streaming.publishMalformed()
  }

  expireEventsThrough (replayId: number): void {
    this.#streaming.expireEventsThrough(replayId)
  }

  get retainedEvents (): readonly PlatformEventMessage[] {
    return this.#streaming.retained
  }

  dropAllSessions (): void {
    this.#streaming.dropAllSessions()
  }

  stopAnsweringConnects (): void {
    this.#streaming.stopAnsweringConnects()
  }

  resumeAnsweringConnects (): void {
    this.#streaming.resumeAnsweringConnects()
  }

  get streamingStats (): StreamingStats {
    return { ...this.#streaming.stats }
  }

  /** The CometD clients the server still knows: handshaken, and neither disconnected nor forgotten. */
  get streamingClientCount (): number {
    return this.#streaming.clientCount
  }

  protected endpoint (call: IncomingCall): Endpoint {
    if (call.path === '/services/oauth2/token') {
      return {
        route: 'oauth/token',
        params: { grant_type: new URLSearchParams(call.body.toString('utf8')).get('grant_type') },
        handle: () => this.#token(call),
        protocolError: (fault: Fault) => jsonReply(fault.status ?? 400, {
          error: fault.code ?? 'invalid_grant',
          error_description: fault.message ?? 'authentication failure'
        })
      }
    }
    const rest = /^\/services\/data\/v(\d+\.0)\/(.*?)\/?$/.exec(call.path)
    if (rest !== null) {
      const [, version = '', resource = ''] = rest
      const [collection, sobject, id] = resource.split('/')
      const body = parseJson(call.body)
      return {
        route: collection === 'sobjects' ? `rest/sobjects/${sobject ?? ''}` : `rest/${resource}`,
        params: {
          version,
          ...(id === undefined ? {} : { id }),
          ...(call.query.has('q') ? { q: call.query.get('q') } : {}),
          ...(call.body.length > 0 && 'value' in body ? { body: body.value } : {})
        },
        handle: () => this.#rest(call, version, resource),
        protocolError: (fault: Fault) => this.#restReply(fault.status ?? 500, restError(
          fault.code ?? 'UNKNOWN_EXCEPTION',
          fault.message ?? 'An unexpected error occurred. Please include this ErrorId if you contact support: 1234567890-12345 (-1234567890)'
        ))
      }
    }
    if (/^\/cometd\/\d+\.\d(\/.*)?$/.test(call.path)) {
      const channels = (bayeuxMessages(call.body) ?? []).map(message => message.channel)
      return {
        route: typeof channels[0] === 'string' ? `cometd${channels[0]}` : 'cometd',
        params: { channels, messages: bayeuxMessages(call.body) },
        handle: () => this.#streaming.handle(call, bearerToken(call.headers, ['bearer', 'oauth'])),
        protocolError: (fault: Fault) => this.#streaming.errorReply(call, fault)
      }
    }
    return {
      route: 'not-found',
      handle: () => jsonReply(404, restError('NOT_FOUND', 'The requested resource does not exist')),
      protocolError: () => jsonReply(404, restError('NOT_FOUND', 'The requested resource does not exist'))
    }
  }

  protected override control (call: IncomingCall): Reply | undefined {
    switch (`${call.method} ${call.path}`) {
      case 'GET /__sandbox/limits':
        return jsonReply(200, this.apiUsage)
      case 'PUT /__sandbox/limits': {
        const { used, max } = controlBody(call)
        for (const value of [used, max]) {
          if (value !== undefined && !(Number.isInteger(value) && (value as number) >= 0)) {
            throw new SandboxControlError('used and max must be non-negative integers')
          }
        }
        this.setApiUsage({ used: used as number | undefined, max: max as number | undefined })
        return jsonReply(200, this.apiUsage)
      }
      case 'POST /__sandbox/expire-tokens':
        this.expireAccessTokens()
        return emptyReply()
      case 'GET /__sandbox/orders':
        return jsonReply(200, { orders: this.orders })
      case 'POST /__sandbox/orders':
        return jsonReply(201, { id: this.putOrder(writableFields(controlBody(call))) })
      case 'POST /__sandbox/events': {
        const { orderId } = controlBody(call)
        if (typeof orderId !== 'string' || orderId === '') throw new SandboxControlError('orderId must be a non-empty string')
        return jsonReply(201, { replayId: this.publishOrderProvisionRequested(orderId) })
      }
      case 'GET /__sandbox/events':
        return jsonReply(200, { events: this.retainedEvents })
      case 'POST /__sandbox/events/expire': {
        const { throughReplayId } = controlBody(call)
        if (!Number.isInteger(throughReplayId)) throw new SandboxControlError('throughReplayId must be an integer')
        this.expireEventsThrough(throughReplayId as number)
        return emptyReply()
      }
      case 'POST /__sandbox/drop-sessions':
        this.dropAllSessions()
        return emptyReply()
      case 'POST /__sandbox/connects/stop':
        this.stopAnsweringConnects()
        return emptyReply()
      case 'POST /__sandbox/connects/resume':
        this.resumeAnsweringConnects()
        return emptyReply()
      case 'GET /__sandbox/streaming':
        return jsonReply(200, { stats: this.streamingStats, clients: this.#streaming.clientCount })
    }
    const orderId = /^\/__sandbox\/orders\/([A-Za-z0-9]+)$/.exec(call.path)?.[1]
    if (orderId !== undefined && call.method === 'PATCH') {
      if (!this.updateOrder(orderId, writableFields(controlBody(call)))) return jsonReply(404, { error: `no order ${orderId}` })
      return jsonReply(200, { order: this.order(orderId) })
    }
    return undefined
  }

  #tokenIsValid (token: string): boolean {
    const expiresAt = this.#tokens.get(token)
    return expiresAt !== undefined && expiresAt > Date.now()
  }

  #token (call: IncomingCall): Reply {
    const form = new URLSearchParams(call.body.toString('utf8'))
    const failed = ({ error, description }: OAuthFailure): Reply => jsonReply(400, { error, error_description: description })
    if (call.method !== 'POST') return failed({ error: 'invalid_request', description: 'must use HTTP POST' })
    if (form.get('grant_type') !== JWT_BEARER_GRANT) return failed({ error: 'unsupported_grant_type', description: 'grant type not supported' })
    const failure = this.#assertionFailure(form.get('assertion') ?? '')
    if (failure !== undefined) return failed(failure)
    const accessToken = `${this.orgId.slice(0, 15)}!${randomBytes(72).toString('base64url')}`
    this.#tokens.set(accessToken, Date.now() + this.sessionTimeoutMs)
    return jsonReply(200, {
      access_token: accessToken,
      scope: 'api',
      instance_url: this.instanceUrl,
      id: `${this.loginUrl}/id/${this.orgId}/${this.userId}`,
      token_type: 'Bearer'
    })
  }

  /** Checks a JWT bearer assertion in the order Salesforce does; undefined when it is good. */
  #assertionFailure (assertion: string): OAuthFailure | undefined {
    const invalidAssertion = { error: 'invalid_grant', description: 'invalid assertion' }
    const [encodedHeader, encodedClaims, signature, ...extra] = assertion.split('.')
    const header = decodeJwtPart(encodedHeader)
    const claims = decodeJwtPart(encodedClaims)
    if (header === undefined || claims === undefined || signature === undefined || extra.length > 0 || header.alg !== 'RS256') {
      return invalidAssertion
    }
    if (claims.iss !== this.clientId) return { error: 'invalid_client_id', description: 'client identifier invalid' }
    const signed = verify('RSA-SHA256', Buffer.from(`${encodedHeader}.${encodedClaims}`), this.#publicKey, Buffer.from(signature, 'base64url'))
    if (!signed) return invalidAssertion
    const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud]
    if (!audiences.some(audience => typeof audience === 'string' && audience.replace(/\/$/, '') === this.loginUrl)) {
      return { error: 'invalid_grant', description: 'audience is invalid' }
    }
    const nowS = Date.now() / 1000
    if (typeof claims.exp !== 'number') return invalidAssertion
    if (claims.exp <= nowS) return { error: 'invalid_grant', description: 'expired authorization code' }
    if (claims.exp > nowS + MAX_ASSERTION_LIFETIME_S) return invalidAssertion
    if (typeof claims.sub !== 'string' || claims.sub.toLowerCase() !== this.username.toLowerCase()) {
      return { error: 'invalid_grant', description: "user hasn't approved this consumer" }
    }
    return undefined
  }

  /** A REST answer with the org's API usage, as every Salesforce REST answer has. */
  #restReply (status: number, body?: unknown, headers: Record<string, string> = {}): Reply {
    const limitInfo = { 'sforce-limit-info': `api-usage=${this.#usage.used}/${this.#usage.max}`, ...headers }
    return body === undefined ? emptyReply(status, limitInfo) : jsonReply(status, body, limitInfo)
  }

  #rest (call: IncomingCall, version: string, resource: string): Reply {
    const token = bearerToken(call.headers, ['bearer', 'oauth'])
    if (token === undefined || !this.#tokenIsValid(token)) {
      return jsonReply(401, restError('INVALID_SESSION_ID', 'Session expired or invalid'), { 'www-authenticate': 'Token' })
    }
    if (this.#usage.used >= this.#usage.max) return this.#restReply(403, restError('REQUEST_LIMIT_EXCEEDED', 'TotalRequests Limit exceeded.'))
    this.#usage.used++
    const [collection, sobject, id, ...rest] = resource.split('/')
    if (resource === 'limits') return call.method === 'GET' ? this.#restReply(200, this.#limits()) : this.#methodNotAllowed(call, 'GET,HEAD')
    if (resource === 'query') return call.method === 'GET' ? this.#query(call.query.get('q') ?? '', version) : this.#methodNotAllowed(call, 'GET,HEAD')
    if (collection !== 'sobjects' || sobject !== 'Order' || rest.length > 0) {
      return this.#restReply(404, restError('NOT_FOUND', 'The requested resource does not exist'))
    }
    if (id === undefined) return call.method === 'POST' ? this.#createOrder(call) : this.#methodNotAllowed(call, 'GET,POST,HEAD')
    const order = this.#orders.get(caseSafeId(id))
    if (order === undefined) return this.#restReply(404, restError('NOT_FOUND', 'The requested resource does not exist'))
    if (call.method === 'GET') {
      return this.#restReply(200, { attributes: { type: 'Order', url: `/services/data/v${version}/sobjects/Order/${String(order.Id)}` }, ...order })
    }
    if (call.method === 'PATCH') return this.#updateOrder(call, order)
    return this.#methodNotAllowed(call, 'GET,PATCH,DELETE,HEAD')
  }

  /**
   * A SOQL query on Order, as much of the language as the service speaks: `SELECT fields FROM Order`,
   * an optional `WHERE` of `Field = 'text'` or `Field IN ('a', 'b')` joined by `AND`, an optional
   * `LIMIT`. The answer is Salesforce's: `{totalSize, done, records}`, each record with its `attributes`.
   */
  #query (soql: string, version: string): Reply {
    const malformed = (message: string) => this.#restReply(400, restError('MALFORMED_QUERY', message))
    const parsed = /^\s*SELECT\s+(.+?)\s+FROM\s+(\w+)(?:\s+WHERE\s+(.+?))?(?:\s+LIMIT\s+(\d+))?\s*$/is.exec(soql)
    if (parsed === null) return malformed(`unexpected token in query: ${soql.slice(0, 80)}`)
    const [, selected = '', sobject = '', where, limit] = parsed
    if (sobject.toLowerCase() !== 'order') {
      return this.#restReply(400, restError('INVALID_TYPE', `sObject type '${sobject}' is not supported.`))
    }
    const field = (name: string): OrderField | undefined => ORDER_FIELD_BY_LOWER_NAME.get(name.trim().toLowerCase())
    const fields = selected.split(',').map(name => ({ name: name.trim(), field: field(name) }))
    const unknown = fields.find(candidate => candidate.field === undefined)
    if (unknown !== undefined) return this.#restReply(400, restError('INVALID_FIELD', `No such column '${unknown.name}' on entity 'Order'.`))
    const conditions: Array<{ field: OrderField, values: string[] }> = []
    for (const condition of where === undefined ? [] : where.split(/\s+AND\s+/i)) {
      const match = /^(\w+)\s*(?:=\s*('(?:[^'\\]|\\.)*')|IN\s*\(\s*('(?:[^'\\]|\\.)*'(?:\s*,\s*'(?:[^'\\]|\\.)*')*)\s*\))$/i.exec(condition.trim())
      if (match === null) return malformed(`unexpected token in WHERE: ${condition.trim().slice(0, 80)}`)
      const [, name = '', single, list] = match
      const conditionField = field(name)
      if (conditionField === undefined) return this.#restReply(400, restError('INVALID_FIELD', `No such column '${name}' on entity 'Order'.`))
      const values = [...(single ?? list ?? '').matchAll(/'((?:[^'\\]|\\.)*)'/g)].map(([, value = '']) => value.replace(/\\(.)/g, '$1'))
      conditions.push({ field: conditionField, values })
    }
    const records = [...this.#orders.values()]
      .filter(order => conditions.every(({ field, values }) => values.some(value =>
        field === 'Id' ? caseSafeId(value) === order.Id : String(order[field] ?? '') === value)))
      .slice(0, limit === undefined ? undefined : Number(limit))
      .map(order => ({
        attributes: { type: 'Order', url: `/services/data/v${version}/sobjects/Order/${String(order.Id)}` },
        ...Object.fromEntries(fields.map(({ field }) => [field!, order[field!]]))
      }))
    return this.#restReply(200, { totalSize: records.length, done: true, records })
  }

  #methodNotAllowed (call: IncomingCall, allowed: string): Reply {
    return this.#restReply(405, restError('METHOD_NOT_ALLOWED', `HTTP Method '${call.method}' not allowed. Allowed are ${allowed}`))
  }

  #limits (): Record<string, { Max: number, Remaining: number }> {
    return {
      DailyApiRequests: { Max: this.#usage.max, Remaining: Math.max(0, this.#usage.max - this.#usage.used) },
      DailyDeliveredPlatformEvents: { Max: 50_000, Remaining: 50_000 },
      DailyStreamingApiEvents: { Max: 1_000_000, Remaining: 1_000_000 },
      DataStorageMB: { Max: 1024, Remaining: 1024 },
      HourlyPublishedPlatformEvents: { Max: 250_000, Remaining: 250_000 }
    }
  }

  /** The body's fields under their canonical names, or the error Salesforce answers. */
  #orderFields (call: IncomingCall): { fields: OrderFields } | { rejection: Reply } {
    const reject = (errorCode: string, message: string, extra: Record<string, unknown> = {}): { rejection: Reply } =>
      ({ rejection: this.#restReply(400, restError(errorCode, message, extra)) })
    const parsed = parseJson(call.body)
    if ('error' in parsed) return reject('JSON_PARSER_ERROR', parsed.error)
    const body = parsed.value
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      return reject('JSON_PARSER_ERROR', 'Cannot deserialize instance of Order from the request body')
    }
    const fields: Record<string, unknown> = {}
    for (const [name, value] of Object.entries(body)) {
      if (name === 'attributes') continue
      const field = ORDER_FIELD_BY_LOWER_NAME.get(name.toLowerCase())
      if (field === undefined) return reject('INVALID_FIELD', `No such column '${name}' on sobject of type Order`)
      if (READ_ONLY.has(field)) {
        return reject('INVALID_FIELD_FOR_INSERT_UPDATE',
          `Unable to create/update fields: ${field}. Please check the security settings of this field and verify that it is read/write for your user or profile.`,
          { fields: [field] })
      }
      if (typeof value === 'object' && value !== null) {
        return reject('JSON_PARSER_ERROR', `Cannot deserialize instance of string from START_OBJECT value for field ${field}`)
      }
      fields[field] = value
    }
    return { fields: fields as OrderFields }
  }

  #createOrder (call: IncomingCall): Reply {
    const parsed = this.#orderFields(call)
    if ('rejection' in parsed) return parsed.rejection
    return this.#restReply(201, { id: this.putOrder(parsed.fields), success: true, errors: [] })
  }

  #updateOrder (call: IncomingCall, order: OrderRecord): Reply {
    const parsed = this.#orderFields(call)
    if ('rejection' in parsed) return parsed.rejection
    Object.assign(order, parsed.fields, { LastModifiedDate: salesforceDateTime() })
    return this.#restReply(204)
  }
}

import { createHash, randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Simulator, bearerToken, jsonReply } from './simulator.js'
import type { Endpoint, Fault, IncomingCall, Reply, SimulatorOptions } from './simulator.js'

export interface TelecomSimulatorOptions extends SimulatorOptions {
  apiKey?: string
  /** How long creating an activation takes; a second request with the same key meanwhile gets 409. */
  activationDelayMs?: number
}

export interface Activation {
  id: string
  orderId: string
  productId: string
  msisdn: string
  status: 'active'
  createdAt: string
}

export interface IdempotencyKeyUse {
  key: string
  /** Requests that carried the key, replays and refusals included. */
  uses: number
}

interface StoredOutcome {
  fingerprint: string
  uses: number
  /** Undefined while the first request with the key is still being processed. */
  reply?: Reply
}

function apiError (status: number, type: string, message: string, headers: Record<string, string> = {}): Reply {
  return jsonReply(status, { error: { type, message } }, headers)
}

/** JSON with its keys sorted, so that the same parameters in another order are the same request. */
function canonicalJson (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value).sort(([a], [b]) => a.localeCompare(b))
    return `{${entries.map(([key, child]) => `${JSON.stringify(key)}:${canonicalJson(child)}`).join(',')}}`
  }
  return JSON.stringify(value)
}

/**
 * A telecom provider's activation API, with Stripe-style idempotency keys: the first answer to a key is
 * stored and replayed, and a key reused with other parameters is refused.
 */
export class TelecomSimulator extends Simulator {
  readonly apiKey: string
  readonly activationDelayMs: number
  #activations: Activation[] = []
  #outcomes = new Map<string, StoredOutcome>()

  constructor (options: TelecomSimulatorOptions = {}) {
    super(options)
    this.apiKey = options.apiKey ?? 'sandbox-telecom-key'
    this.activationDelayMs = options.activationDelayMs ?? 0
  }

  /** The activations really created: one per idempotency key however often it was sent. */
  get activations (): readonly Activation[] {
    return this.#activations.map(activation => ({ ...activation }))
  }

  get idempotencyKeys (): readonly IdempotencyKeyUse[] {
    return [...this.#outcomes].map(([key, outcome]) => ({ key, uses: outcome.uses }))
  }

  protected endpoint (call: IncomingCall): Endpoint {
    const protocolError = (fault: Fault): Reply =>
      apiError(fault.status ?? 400, fault.code ?? 'invalid_request_error', fault.message ?? 'The request was rejected by the provider')
    const route = `${call.method} ${call.path}`
    if (route === 'POST /v1/activations') {
      return {
        route: 'activations',
        params: { idempotencyKey: call.headers['idempotency-key'], body: call.body.toString('utf8') },
        handle: () => this.#authorized(call) ?? this.#activate(call),
        protocolError
      }
    }
    if (route === 'GET /v1/status') {
      return { route: 'status', handle: () => this.#authorized(call) ?? jsonReply(200, { status: 'ok' }), protocolError }
    }
    const notFound = (): Reply => apiError(404, 'invalid_request_error', `Unrecognized request URL (${call.method}: ${call.path})`)
    return { route: 'not-found', handle: notFound, protocolError }
  }

  protected override control (call: IncomingCall): Reply | undefined {
    if (call.method === 'GET' && call.path === '/__sandbox/activations') {
      return jsonReply(200, { activations: this.activations, idempotencyKeys: this.idempotencyKeys })
    }
    return undefined
  }

  /** The 401 for a missing or wrong API key; undefined when the key is right. */
  #authorized (call: IncomingCall): Reply | undefined {
    const key = bearerToken(call.headers)
    if (key === this.apiKey) return undefined
    return apiError(401, 'authentication_error', key === undefined ? 'No API key provided' : 'Invalid API key provided', {
      'www-authenticate': 'Bearer realm="telecom"'
    })
  }

  async #activate (call: IncomingCall): Promise<Reply> {
    const key = call.headers['idempotency-key']
    if (typeof key !== 'string' || key === '' || key.length > 255) {
      return apiError(400, 'invalid_request_error', 'An Idempotency-Key header (1-255 characters) is required')
    }
    let body: unknown
    try {
      body = JSON.parse(call.body.toString('utf8'))
    } catch {
      return apiError(400, 'invalid_request_error', 'The body is not valid JSON')
    }
    const fingerprint = createHash('sha256').update(canonicalJson(body)).digest('hex')
    const stored = this.#outcomes.get(key)
    if (stored !== undefined) {
      stored.uses++
      if (stored.fingerprint !== fingerprint) {
        return apiError(422, 'idempotency_error', 'Keys for idempotent requests can only be used with the same parameters they were first used with.')
      }
      if (stored.reply === undefined) {
        return apiError(409, 'idempotency_error', 'A request with this Idempotency-Key is still being processed; retry later.')
      }
      return { ...stored.reply, headers: { ...stored.reply.headers, 'idempotent-replayed': 'true' } }
    }
    const { orderId, productId } = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>
    // A request refused before it ran leaves no stored answer, so the key can be used again.
    if (typeof orderId !== 'string' || orderId === '' || typeof productId !== 'string' || productId === '') {
      return apiError(400, 'invalid_request_error', 'orderId and productId must be non-empty strings')
    }
    const outcome: StoredOutcome = { fingerprint, uses: 1 }
    this.#outcomes.set(key, outcome)
    if (this.activationDelayMs > 0) await sleep(this.activationDelayMs)
    const activation: Activation = {
      id: `act_${randomBytes(12).toString('hex')}`,
      orderId,
      productId,
      msisdn: `+447700900${String(this.#activations.length % 1000).padStart(3, '0')}`,
      status: 'active',
      createdAt: new Date().toISOString()
    }
    this.#activations.push(activation)
    outcome.reply = jsonReply(201, activation)
    return outcome.reply
  }
}

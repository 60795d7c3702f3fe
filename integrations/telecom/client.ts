import type { Cancellation } from '../../lib/deadline.js'
import { UpstreamFailure, type FailureClass } from '../../lib/errors.js'
import { Upstream, asRecord, brief, errorBody, type UpstreamOptions, type UpstreamResponse } from '../upstream.js'

export interface TelecomClientOptions extends UpstreamOptions {
  /** Base URL; the API lives under `/v1/`. */
  url: string
  apiKey: string
}

export interface ActivationRequest {
  orderId: string
  productId: string
  /** The same key always gets the first answer back, so a retry never activates twice. */
  idempotencyKey: string
}

export interface Activation {
  id: string
  status: string
  /** The activated number; null when the provider has not assigned one yet. */
  msisdn: string | null
  /** True when the provider replayed the answer to an earlier request with the same key. */
  replayed: boolean
}

/**
 * An error answer with the provider's error type: 409 while a request with the same idempotency key is
 * still being processed (worth retrying later), 422 when the key was used with other parameters.
 */
export class TelecomApiError extends UpstreamFailure {
  constructor (failure: FailureClass, readonly status: number, readonly errorType: string, message: string) {
    super(failure, 'telecom', message)
    this.name = 'TelecomApiError'
  }
}

function failureOf (status: number): FailureClass {
  if (status === 401 || status === 403) return 'auth_failed'
  if (status === 429) return 'quota_exceeded'
  return 'upstream_error'
}

/** An id or a number as text: the contract gives them no type, and JSON may carry either. */
function identifier (value: unknown): string | undefined {
  if (typeof value === 'string' && value !== '') return value
  return typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : undefined
}

export class TelecomClient {
  readonly #upstream: Upstream
  readonly #url: string
  readonly #apiKey: string

  constructor (options: TelecomClientOptions) {
    this.#upstream = new Upstream('telecom', options, [options.apiKey])
    this.#url = options.url.replace(/\/+$/, '')
    this.#apiKey = options.apiKey
  }

  activate ({ orderId, productId, idempotencyKey }: ActivationRequest, until?: Cancellation): Promise<Activation> {
    const operation = 'activate'
    return this.#upstream.call(operation, async (deadline) => {
      const response = await this.#upstream.send({
        url: `${this.#url}/v1/activations`,
        method: 'POST',
        headers: { ...this.#headers(), 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
        body: JSON.stringify({ orderId, productId }),
        signal: deadline
      })
      const answer = this.#answer(response, operation)
      const id = identifier(answer.id)
      const { status } = answer
      const msisdn = answer.msisdn === null || answer.msisdn === undefined ? null : identifier(answer.msisdn)
      if (id === undefined || typeof status !== 'string' || msisdn === undefined) {
        throw this.#upstream.failure('upstream_error', `${operation}: HTTP ${response.status} answer without an activation`)
      }
      return { id, status, msisdn, replayed: response.headers['idempotent-replayed'] === 'true' }
    }, until)
  }

  async health (until: Cancellation): Promise<void> {
    const operation = 'status'
    await this.#upstream.call(operation, async (deadline) => {
      const response = await this.#upstream.send({ url: `${this.#url}/v1/status`, method: 'GET', headers: this.#headers(), signal: deadline })
      // Any 2xx is healthy: the contract gives the status answer no body to read.
      if (response.status < 200 || response.status >= 300) this.#answer(response, operation)
    }, until)
  }

  close (): Promise<void> {
    return this.#upstream.close()
  }

  #headers (): Record<string, string> {
    return { authorization: `Bearer ${this.#apiKey}`, accept: 'application/json' }
  }

  /** A 2xx answer's JSON object; any other answer becomes the failure it means. */
  #answer (response: UpstreamResponse, operation: string): Record<string, unknown> {
    if (response.status >= 500) throw this.#upstream.failure('http_5xx', `${operation}: HTTP ${response.status}`)
    if (response.status >= 200 && response.status < 300) return asRecord(this.#upstream.json(response, operation))
    const { type, message } = asRecord(asRecord(errorBody(response.text)).error)
    const errorType = typeof type === 'string' ? type : 'unknown'
    const detail = typeof message === 'string' && message !== '' ? `: ${brief(message)}` : ''
    throw new TelecomApiError(failureOf(response.status), response.status, errorType, `${operation}: HTTP ${response.status} ${errorType}${detail}`)
  }
}

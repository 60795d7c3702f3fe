import type { Cancellation } from '../../lib/deadline.js'
import { Upstream, asRecord, brief, type UpstreamLogger, type UpstreamOptions } from '../upstream.js'
import { BillingRefusal } from './errors.js'
import { toText, type WhmcsAnswer } from './mapping.js'

/**
 * WHMCS's refusals of the API credentials or of this host, which it answers with HTTP 403 but
 * which some setups pass on with 200: none is about the request.
 */
const CREDENTIALS_REFUSED = /^\s*(authentication failed|invalid or missing credentials|invalid ip\b|invalid access key|ip banned)/i

type WhmcsValue = string | number
export type WhmcsParams = Record<string, WhmcsValue | readonly WhmcsValue[] | undefined>

/** The WHMCS API's wire: an action `POST`ed as form fields with `responsetype=json`, its answer sorted out. */
export class WhmcsApi {
  readonly #upstream: Upstream
  readonly #url: string
  readonly #identifier: string
  readonly #secret: string

  constructor (options: UpstreamOptions & { url: string, identifier: string, secret: string }) {
    this.#upstream = new Upstream('billing', options, [options.identifier, options.secret])
    this.#url = options.url
    this.#identifier = options.identifier
    this.#secret = options.secret
  }

  get log (): UpstreamLogger {
    return this.#upstream.log
  }

  close (): Promise<void> {
    return this.#upstream.close()
  }

  /**
   * One action. `read` turns a success into the result; `refused` may turn an error message the caller
   * expects into a result (not-found as null), returning undefined for any other message.
   */
  action<T> (action: string, params: WhmcsParams, until: Cancellation | undefined,
    read: (answer: WhmcsAnswer) => T, refused?: (message: string) => T | undefined): Promise<T> {
    return this.#upstream.call(action, async (deadline) => {
      const response = await this.#upstream.send({
        url: this.#url,
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: this.#form(action, params),
        signal: deadline
      })
      if (response.status >= 500) throw this.#upstream.failure('http_5xx', `${action}: HTTP ${response.status}`)
      if (response.status === 401 || response.status === 403) throw this.#upstream.failure('auth_failed', `${action}: refused the API credentials (HTTP ${response.status})`)
      const answer = asRecord(this.#upstream.json(response, action))
      const message = toText(answer.message)
      if (answer.result === 'success') return read(answer)
      // Some actions (GetInvoice of a missing invoice, for one) answer `status: error` without a result.
      const isError = answer.result === 'error' || (answer.result === undefined && answer.status === 'error')
      if (!isError) throw this.#upstream.failure('upstream_error', `${action}: HTTP ${response.status} answer without a result`)
      if (CREDENTIALS_REFUSED.test(message)) throw this.#upstream.failure('auth_failed', `${action}: refused the API credentials (${brief(message)})`)
      const result = refused?.(message)
      if (result !== undefined) return result
      throw new BillingRefusal(action, message)
    }, until)
  }

  /** PHP reads `pid[0]=1&pid[1]=2` as a list. */
  #form (action: string, params: WhmcsParams): string {
    const form = new URLSearchParams({
      identifier: this.#identifier,
      secret: this.#secret,
      action,
      responsetype: 'json'
    })
    for (const [name, value] of Object.entries(params)) {
      if (typeof value === 'object') value.forEach((item, index) => form.append(`${name}[${index}]`, String(item)))
      else if (value !== undefined) form.append(name, String(value))
    }
    return form.toString()
  }
}

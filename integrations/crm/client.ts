import type { Dispatcher } from 'undici'
import type { Cancellation } from '../../lib/deadline.js'
import type { FailureClass, UpstreamFailure } from '../../lib/errors.js'
import type { ApiUsage, DailyUsageStore } from './daily-usage.js'
import { CrmApiError, isNotFound, restError } from './errors.js'
import { caseSafeId, isSalesforceId } from './salesforce-id.js'
import { JwtBearerSessions, type CrmSession } from './session.js'
import { Upstream, asRecord, brief, type UpstreamOptions, type UpstreamResponse } from '../upstream.js'

export type { CrmSession }

export interface CrmClientOptions extends UpstreamOptions {
  /** The OAuth server, e.g. `https://login.salesforce.com`. */
  loginUrl: string
  /**
   * The assertion's audience, `loginUrl` by default. Salesforce wants `https://login.salesforce.com`
   * (or `test.` for a sandbox org) even when tokens are asked of a My Domain login URL.
   */
  audience?: string
  /** The connected app's consumer key: the assertion's issuer. */
  clientId: string
  /** The integration user: the assertion's subject. */
  username: string
  /** PEM of the RSA key that signs the assertion. */
  privateKey: string
  /** e.g. `60.0` */
  apiVersion: string
  usage: DailyUsageStore
}

export type CrmOrderField = 'Status' | 'AccountId' | 'EffectiveDate' | 'Name' | 'Description' | 'Type' |
  'Pricebook2Id' | 'BillingOrderId__c' | 'BillingClientId__c' | 'Product__c' | 'Provisioning_Error__c'
export type CrmFieldValue = string | number | boolean | null
/** The Order fields the service writes. */
export type CrmOrderFields = Partial<Record<CrmOrderField, CrmFieldValue>>

export interface CrmOrder extends CrmOrderFields {
  Id: string
  OrderNumber?: string
  CreatedDate?: string
  LastModifiedDate?: string
}

const DEFAULT_LIMITS_REFRESH_MS = 300_000

/** Record ids become `{id}`, so that an operation name is a metric label of bounded cardinality. */
function operationOf (method: string, path: string): string {
  const resource = path.split('?')[0] ?? ''
  return `${method} ${resource.replace(/(?<=^|\/)(?=[A-Za-z]*\d)[A-Za-z0-9]{15}(?:[A-Za-z0-9]{3})?(?=\/|$)/g, '{id}')}`
}

/** `Sforce-Limit-Info: api-usage=25/15000` (other usages, such as `per-app-api-usage`, may follow). */
export function usageFrom (response: Pick<UpstreamResponse, 'headers'>): ApiUsage | undefined {
  const header = response.headers['sforce-limit-info']
  const match = /(?:^|[\s,;])api-usage=(\d+)\/(\d+)/.exec(Array.isArray(header) ? header.join(',') : header ?? '')
  return match === null ? undefined : { used: Number(match[1]), limit: Number(match[2]) }
}

/**
 * Salesforce: OAuth 2.0 JWT bearer tokens and the REST API, with the org's daily API usage kept in a
 * DailyUsageStore. Health is checked with the `limits` resource, which needs a valid session and
 * refreshes the usage figures on the way.
 */
export class CrmClient {
  readonly #upstream: Upstream
  readonly #sessions: JwtBearerSessions
  readonly #apiVersion: string
  readonly #usage: DailyUsageStore
  #limitsRefresh: NodeJS.Timeout | undefined

  constructor (options: CrmClientOptions) {
    this.#upstream = new Upstream('crm', options, [options.clientId])
    this.#sessions = new JwtBearerSessions(this.#upstream, options)
    this.#apiVersion = options.apiVersion
    this.#usage = options.usage
  }

  /** The current session, minted when there is none; concurrent callers share one mint. */
  session (signal?: AbortSignal): Promise<CrmSession> {
    return this.#sessions.session(signal)
  }

  /**
   * Forgets the session so that the next caller mints a new one. Given the session that was refused,
   * it leaves alone a session that has replaced it already, so that many refusals make one mint.
   */
  invalidateSession (refused?: CrmSession): void {
    this.#sessions.invalidate(refused)
  }

  /**
   * A REST call under `/services/data/v{apiVersion}/`. A refused session is replaced and the call made
   * once more; resolves with the JSON answer (undefined for 204).
   */
  request<T> (method: Dispatcher.HttpMethod, path: string, body?: unknown, until?: Cancellation): Promise<T> {
    return this.#rest(method, path, body, until, answer => answer as T)
  }

  /** Reads `limits` and records the daily API figures as the CRM's own. */
  getLimits (until?: Cancellation): Promise<ApiUsage> {
    return this.#rest('GET', 'limits', undefined, until, answer => {
      const { Max, Remaining } = asRecord(asRecord(answer).DailyApiRequests)
      if (typeof Max !== 'number' || typeof Remaining !== 'number') {
        throw this.#malformed('GET limits', 'DailyApiRequests')
      }
      const usage = { used: Max - Remaining, limit: Max }
      this.#usage.record(usage)
      return usage
    })
  }

  createOrder (fields: CrmOrderFields, until?: Cancellation): Promise<string> {
    return this.#rest('POST', 'sobjects/Order', fields, until, answer => {
      const { id } = asRecord(answer)
      if (typeof id !== 'string') throw this.#malformed('POST sobjects/Order', 'id')
      return id
    })
  }

  /** The order, or null when the CRM has no order with this id. */
  getOrder (id: string, until?: Cancellation): Promise<CrmOrder | null> {
    return this.#rest('GET', `sobjects/Order/${encodeURIComponent(id)}`, undefined, until, answer => {
      const { attributes, ...order } = asRecord(answer)
      if (typeof order.Id !== 'string') throw this.#malformed('GET sobjects/Order/{id}', 'Id')
      return order as unknown as CrmOrder
    }, () => null)
  }

  /** The records of a SOQL query's first batch (up to 2,000; `query?q=`). */
  query<T extends Record<string, unknown>> (soql: string, until?: Cancellation): Promise<T[]> {
    return this.#rest('GET', `query?q=${encodeURIComponent(soql)}`, undefined, until, answer => {
      const { records } = asRecord(answer)
      if (!Array.isArray(records)) throw this.#malformed('GET query', 'records')
      return records.map(record => {
        const { attributes, ...fields } = asRecord(record)
        return fields as T
      })
    })
  }

  /** The id of the order that carries this billing order id, or null when there is none. */
  async findOrderIdByBillingOrderId (billingOrderId: number, until?: Cancellation): Promise<string | null> {
    // A number has no quote to escape.
    const [order] = await this.query<{ Id: string }>(`SELECT Id FROM Order WHERE BillingOrderId__c = '${Math.trunc(billingOrderId)}' LIMIT 1`, until)
    return order?.Id ?? null
  }

  /**
   * The Status of each of these orders that the CRM has, by its 18-character id: one SOQL query
   * (`WHERE Id IN`), so one API call for up to 2,000 orders. A string that is no record id is not asked.
   */
  async getOrderStatuses (ids: readonly string[], until?: Cancellation): Promise<Map<string, string>> {
    // Record ids have no quote to escape.
    const quoted = ids.filter(isSalesforceId).map(id => `'${id}'`)
    if (quoted.length === 0) return new Map()
    const records = await this.query<{ Id: unknown, Status: unknown }>(`SELECT Id, Status FROM Order WHERE Id IN (${quoted.join(', ')})`, until)
    return new Map(
      records
        .filter((record) => typeof record.Id === 'string')
        .map((record) => [caseSafeId(record.Id as string), String(record.Status ?? '')])
    )
  }

  async updateOrder (id: string, fields: CrmOrderFields, until?: Cancellation): Promise<void> {
    await this.#rest('PATCH', `sobjects/Order/${encodeURIComponent(id)}`, fields, until, () => undefined)
  }

  async health (until: Cancellation): Promise<void> {
    await this.getLimits(until)
  }

  /** Reads `limits` now and every `intervalMs`, so that the daily usage is fresh even when the service is idle. */
  startLimitsRefresh (intervalMs = DEFAULT_LIMITS_REFRESH_MS): void {
    if (this.#limitsRefresh !== undefined) return
    const refresh = (): void => {
      // A failure is logged (at error) by the call itself; the next round tries again.
      this.getLimits().catch(() => {})
    }
    refresh()
    this.#limitsRefresh = setInterval(refresh, intervalMs).unref()
  }

  async close (): Promise<void> {
    clearInterval(this.#limitsRefresh)
    this.#limitsRefresh = undefined
    await this.#upstream.close()
  }

  #malformed (operation: string, field: string): UpstreamFailure {
    return this.#upstream.failure('upstream_error', `${operation}: no ${field} in the answer`)
  }

  /**
   * One REST call: `read` turns the JSON answer (undefined for an empty one: 204, or a PATCH's 200)
   * into the result; `notFound`, if given, answers a 404 (NOT_FOUND, ENTITY_IS_DELETED) or a MALFORMED_ID.
   */
  #rest<T> (method: Dispatcher.HttpMethod, path: string, body: unknown, until: Cancellation | undefined,
    read: (answer: unknown) => T, notFound?: () => T): Promise<T> {
    const operation = operationOf(method, path)
    return this.#upstream.call(operation, async (deadline) => {
      let session = await this.session(deadline)
      let response = await this.#send(session, method, path, body, deadline)
      if (response.status === 401) {
        this.#upstream.log.info(
          { upstream: 'crm', operation },
          'the CRM refused the session; minting a new access token'
        )
        this.invalidateSession(session)
        session = await this.session(deadline)
        response = await this.#send(session, method, path, body, deadline)
      }
      if (response.status >= 200 && response.status < 300) {
        return read(response.text.trim() === '' ? undefined : this.#upstream.json(response, operation))
      }
      if (response.status >= 500) throw this.#upstream.failure('http_5xx', `${operation}: HTTP ${response.status}`)
      const { errorCode, message } = restError(response.text)
      if (notFound !== undefined && isNotFound(response.status, errorCode)) return notFound()
      const failure: FailureClass = response.status === 401
        ? 'auth_failed'
        : response.status === 403 && errorCode === 'REQUEST_LIMIT_EXCEEDED' ? 'quota_exceeded' : 'upstream_error'
      throw new CrmApiError(failure, response.status, errorCode, `${operation}: HTTP ${response.status} ${errorCode}${message === '' ? '' : `: ${brief(message)}`}`)
    }, until)
  }

  async #send (
    session: CrmSession,
    method: Dispatcher.HttpMethod,
    path: string,
    body: unknown,
    signal: AbortSignal
  ): Promise<UpstreamResponse> {
    const response = await this.#upstream.send({
      url: `${session.instanceUrl}/services/data/v${this.#apiVersion}/${path}`,
      method,
      headers: {
        authorization: `Bearer ${session.accessToken}`,
        accept: 'application/json',
        ...(body === undefined ? {} : { 'content-type': 'application/json' })
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal
    })
    const usage = usageFrom(response)
    if (usage !== undefined) this.#usage.record(usage)
    return response
  }
}

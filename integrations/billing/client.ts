import type { Cancellation } from '../../lib/deadline.js'
import { Upstream, asRecord, brief, type UpstreamOptions } from '../upstream.js'
import { BillingRefusal, GatewayRefusal, OrderNotPendingError, OrderRefusedError, PaymentMethodRefusedError } from './errors.js'
import {
  actsFor, clientIdsOfUser, orderStatusOf, says, toClientDetails, toInvoiceDetails, toInvoicePage, toOrderSummaries, toPlacedOrder, toText, toValidatedLogin,
  type BillingOrderSummary, type ClientDetails, type InvoiceDetails, type InvoicePage, type InvoiceQuery, type NewOrder, type PlacedOrder, type SignIn, type WhmcsAnswer
} from './mapping.js'

export interface BillingClientOptions extends UpstreamOptions {
  /** The WHMCS API endpoint, `.../includes/api.php`. */
  url: string
  identifier: string
  secret: string
  /**
   * WHMCS needs an active payment gateway on every order; used when `addOrder` is not given one.
   * Without it: `mailin` (WHMCS's own example), and once WHMCS refuses that, the first gateway its
   * refusal names as valid.
   */
  defaultPaymentMethod?: string
}

/**
 * WHMCS's refusals of the API credentials or of this host, which it answers with HTTP 403 but
 * which some setups pass on with 200: none is about the request.
 */
const CREDENTIALS_REFUSED = /^\s*(authentication failed|invalid or missing credentials|invalid ip\b|invalid access key|ip banned)/i

/** WHMCS's own example gateway, tried when no payment method is configured. */
const FALLBACK_PAYMENT_METHOD = 'mailin'

type WhmcsValue = string | number
export type WhmcsParams = Record<string, WhmcsValue | readonly WhmcsValue[] | undefined>

/** The most client accounts one person is offered: a chooser lists them all. */
const MAX_CLIENTS_OF_A_PERSON = 20

const nameOf = ({ firstName, lastName }: ClientDetails) => `${firstName} ${lastName}`.trim() || null

/** The WHMCS API, spoken as `POST` form fields with `responsetype=json`. */
export class BillingClient {
  readonly #upstream: Upstream
  readonly #url: string
  readonly #identifier: string
  readonly #secret: string
  readonly #configuredPaymentMethod: string | undefined
  #fallbackPaymentMethod = FALLBACK_PAYMENT_METHOD

  constructor (options: BillingClientOptions) {
    this.#upstream = new Upstream('billing', options, [options.identifier, options.secret])
    this.#url = options.url
    this.#identifier = options.identifier
    this.#secret = options.secret
    this.#configuredPaymentMethod = options.defaultPaymentMethod
  }

  /** Any action; resolves with the answer of a `success`, rejects with an UpstreamFailure otherwise. */
  call<T extends WhmcsAnswer = WhmcsAnswer> (action: string, params: WhmcsParams = {}, until?: Cancellation): Promise<T> {
    return this.#action(action, params, until, answer => answer as T)
  }

  /**
   * The user whose email and password these are, or null when they do not match. A user with
   * two-factor authentication on has passed only the first factor, which the API cannot complete.
   */
  validateLogin (email: string, password: string, until?: Cancellation): Promise<{ userId: number, twoFactorRequired: boolean } | null> {
    return this.#action('ValidateLogin', { email, password2: password }, until, toValidatedLogin,
      message => says(message, 'Email or Password Invalid') ? null : undefined)
  }

  /**
   * Checks a sign-in and finds the client account it acts for. Since WHMCS 8 the users who sign in
   * are apart from the clients who are billed, and ValidateLogin answers a user id. A client acts
   * for the user when the user owns it (`owner_user_id`) or is among its users, by id or by the
   * email whose password was just checked (WHMCS 8); where clients list no users (WHMCS 7, where
   * user and client are one), when it has the user's email. The client with the user's id is tried
   * first (the two are equal after an upgrade from WHMCS 7), then the client with the user's email;
   * a user that neither lists signs in as no client.
   */
  async signIn (email: string, password: string, until?: Cancellation): Promise<SignIn> {
    const user = await this.validateLogin(email, password, until)
    if (user === null) return { outcome: 'invalid_credentials' }
    if (user.twoFactorRequired) return { outcome: 'two_factor_required' }
    const client = await this.#clientActingFor([{ clientid: user.userId }, { email }], user.userId, email, until)
    return client === null ? { outcome: 'no_client_account' } : { outcome: 'signed_in', clientId: client.id, name: nameOf(client) }
  }

  /**
   * The client account that acts for the person an identity provider signed in with this email (a
   * verified one): the client with that email, or one that lists a user with it, as signIn finds it.
   */
  async clientActingFor (email: string, until?: Cancellation): Promise<{ clientId: number, name: string | null } | null> {
    const client = await this.#clientActingFor([{ email }], undefined, email, until)
    return client === null ? null : { clientId: client.id, name: nameOf(client) }
  }

  /**
   * Every client account the person with this (verified) email acts for, the ones they own first:
   * WHMCS 8's user of that email lists them (GetUsers), each named by GetClientsDetails; closed
   * ones are left out. Where there is no such user or no GetUsers (WHMCS 7), the one client
   * clientActingFor finds, if any.
   */
  async clientsActingFor (email: string, until?: Cancellation): Promise<Array<{ clientId: number, name: string | null }>> {
    const ids = await this.#action('GetUsers', { search: email }, until, answer => clientIdsOfUser(answer, email),
      message => says(message, 'Command Not Found') ? [] : undefined)
    const clients = (await Promise.all(ids.slice(0, MAX_CLIENTS_OF_A_PERSON).map((id) => this.getClientsDetails(id, until))))
      .filter((client): client is ClientDetails => client !== null && client.status !== 'Closed')
    if (clients.length > 0) return clients.map((client) => ({ clientId: client.id, name: nameOf(client) }))
    const client = await this.clientActingFor(email, until)
    return client === null ? [] : [client]
  }

  async #clientActingFor (lookups: WhmcsParams[], userId: number | undefined, email: string, until?: Cancellation): Promise<ClientDetails | null> {
    for (const lookup of lookups) {
      const client = await this.#action('GetClientsDetails', lookup, until, answer => answer,
        message => says(message, 'Client Not Found') ? null : undefined)
      if (client !== null && actsFor(client, userId, email)) return toClientDetails(client)
    }
    return null
  }

  getClientsDetails (clientId: number, until?: Cancellation): Promise<ClientDetails | null> {
    return this.#action('GetClientsDetails', { clientid: clientId }, until, toClientDetails,
      message => says(message, 'Client Not Found') ? null : undefined)
  }

  getInvoices ({ clientId, status, limitStart, limitNum }: InvoiceQuery, until?: Cancellation): Promise<InvoicePage> {
    // Newest first, by a unique key: WHMCS's own default order (by status and due date) is not one, so pages could overlap.
    const params = { userid: clientId, status, limitstart: limitStart, limitnum: limitNum, orderby: 'id', order: 'desc' }
    return this.#action('GetInvoices', params, until, toInvoicePage)
  }

  getInvoice (invoiceId: number, until?: Cancellation): Promise<InvoiceDetails | null> {
    return this.#action('GetInvoice', { invoiceid: invoiceId }, until, toInvoiceDetails,
      message => says(message, 'Invoice ID Not Found') ? null : undefined)
  }

  /**
   * Rejects with OrderRefusedError when WHMCS refuses the order: an answer, not billing failing; with
   * PaymentMethodRefusedError when it refuses the payment method given or configured. With neither,
   * a refused gateway is replaced by the first one WHMCS names (a refused AddOrder placed nothing).
   */
  async addOrder (order: NewOrder, until?: Cancellation): Promise<PlacedOrder> {
    const chosen = order.paymentMethod ?? this.#configuredPaymentMethod
    if (chosen !== undefined) return await this.#addOrder(order, chosen, false, until)
    const tried = this.#fallbackPaymentMethod
    try {
      return await this.#addOrder(order, tried, true, until)
    } catch (error) {
      if (!(error instanceof GatewayRefusal)) throw error
      const [valid] = error.validMethods
      if (valid === undefined || valid === tried) {
        const failure = new PaymentMethodRefusedError(error.whmcsMessage)
        this.#upstream.log.error({ upstream: 'billing', operation: 'AddOrder', failure: failure.failure }, failure.message)
        throw failure
      }
      // Orders placed at the same time meet the same refusal: the first to learn of it says so.
      if (this.#fallbackPaymentMethod === tried) {
        this.#fallbackPaymentMethod = valid
        this.#upstream.log.warn({ upstream: 'billing', operation: 'AddOrder', refused: tried, paymentMethod: valid },
          `BILLING_PAYMENT_METHOD is not set and WHMCS refuses ${tried}: orders go with ${valid}, the first gateway it names`)
      }
      return await this.#addOrder(order, valid, false, until)
    }
  }

  /** `chosenHere`: the gateway is the client's own choice, which WHMCS may refuse without fault. */
  #addOrder ({ clientId, productId, billingCycle }: NewOrder, paymentMethod: string, chosenHere: boolean, until?: Cancellation): Promise<PlacedOrder> {
    const params = { clientid: clientId, pid: [productId], billingcycle: [billingCycle], paymentmethod: paymentMethod }
    return this.#action('AddOrder', params, until, toPlacedOrder, message => {
      if (!/^invalid payment method/i.test(message.trim())) throw new OrderRefusedError(message)
      throw chosenHere ? new GatewayRefusal(message) : new PaymentMethodRefusedError(message)
    })
  }

  /** Rejects with OrderNotPendingError when the order is not (or no longer) pending. */
  acceptOrder (orderId: number, until?: Cancellation): Promise<void> {
    return this.#action('AcceptOrder', { orderid: orderId }, until, () => undefined, message => {
      if (says(message, 'Order ID not found or Status not Pending')) throw new OrderNotPendingError(orderId)
      return undefined
    })
  }

  /** The order's status (`Pending`, `Active`, `Cancelled`, `Fraud`...), or null when there is no such order. */
  getOrderStatus (orderId: number, until?: Cancellation): Promise<string | null> {
    return this.#action('GetOrders', { id: orderId }, until, orderStatusOf)
  }

  /**
   * Cancels a pending order (WHMCS `CancelOrder`), which cancels its unpaid invoice too; no email is
   * sent. Safe to repeat: an order already cancelled is `cancelled`, one WHMCS does not know is
   * `not_found`. Rejects with OrderNotPendingError when the order went on (accepted) meanwhile.
   */
  async cancelOrder (orderId: number, until?: Cancellation): Promise<'cancelled' | 'not_found'> {
    const refused = await this.#action('CancelOrder', { orderid: orderId, cancelsub: 'true', noemail: 'true' }, until, () => false, () => true)
    if (!refused) return 'cancelled'
    // WHMCS's refusal does not say which it is: the order's status does.
    const status = await this.getOrderStatus(orderId, until)
    if (status === null) return 'not_found'
    if (status === 'Cancelled') return 'cancelled'
    throw new OrderNotPendingError(orderId, 'CancelOrder')
  }

  /** The client's pending orders, newest first (the most recent 100). */
  getPendingOrders (clientId: number, until?: Cancellation): Promise<BillingOrderSummary[]> {
    return this.#action('GetOrders', { userid: clientId, status: 'Pending', limitnum: 100 }, until, toOrderSummaries)
  }

  async health (until: Cancellation): Promise<void> {
    await this.#action('WhmcsDetails', {}, until, () => undefined)
  }

  close (): Promise<void> {
    return this.#upstream.close()
  }

  /**
   * One action. `read` turns a success into the result; `refused` may turn an error message the caller
   * expects into a result (not-found as null), returning undefined for any other message.
   */
  #action<T> (action: string, params: WhmcsParams, until: Cancellation | undefined,
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
    const form = new URLSearchParams({ identifier: this.#identifier, secret: this.#secret, action, responsetype: 'json' })
    for (const [name, value] of Object.entries(params)) {
      if (typeof value === 'object') value.forEach((item, index) => form.append(`${name}[${index}]`, String(item)))
      else if (value !== undefined) form.append(name, String(value))
    }
    return form.toString()
  }
}

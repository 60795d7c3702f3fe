import type { Cancellation } from '../../lib/deadline.js'
import type { UpstreamOptions } from '../upstream.js'
import {
  GatewayRefusal, OrderNotPendingError, OrderRefusedError, PaymentMethodRefusedError
} from './errors.js'
import {
  actsFor, clientIdsOfUser, orderStatusOf, says, toClientDetails, toInvoiceDetails, toInvoicePage, toOrderSummaries,
  toPlacedOrder, toValidatedLogin,
  type BillingOrderSummary, type ClientDetails, type InvoiceDetails, type InvoicePage, type InvoiceQuery, type NewOrder,
  type PlacedOrder, type SignIn, type WhmcsAnswer
} from './mapping.js'
import { WhmcsApi, type WhmcsParams } from './whmcs-api.js'

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

/** WHMCS's own example gateway, tried when no payment method is configured. */
const FALLBACK_PAYMENT_METHOD = 'mailin'

/** The most client accounts one person is offered: a chooser lists them all. */
const MAX_CLIENTS_OF_A_PERSON = 20

const nameOf = ({ firstName, lastName }: ClientDetails) => `${firstName} ${lastName}`.trim() || null

/** The WHMCS API, spoken as `POST` form fields with `responsetype=json`. */
export class BillingClient {
  readonly #api: WhmcsApi
  readonly #configuredPaymentMethod: string | undefined
  #fallbackPaymentMethod = FALLBACK_PAYMENT_METHOD

  constructor (options: BillingClientOptions) {
    this.#api = new WhmcsApi(options)
    this.#configuredPaymentMethod = options.defaultPaymentMethod
  }

  /** Any action; resolves with the answer of a `success`, rejects with an UpstreamFailure otherwise. */
  call<T extends WhmcsAnswer = WhmcsAnswer> (
    action: string,
    params: WhmcsParams = {},
    until?: Cancellation
  ): Promise<T> {
    return this.#api.action(action, params, until, answer => answer as T)
  }

  /**
   * The user whose email and password these are, or null when they do not match. A user with
   * two-factor authentication on has passed only the first factor, which the API cannot complete.
   */
  validateLogin (
    email: string,
    password: string,
    until?: Cancellation
  ): Promise<{ userId: number, twoFactorRequired: boolean } | null> {
    return this.#api.action('ValidateLogin', { email, password2: password }, until, toValidatedLogin,
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
    return client === null
      ? { outcome: 'no_client_account' }
      : { outcome: 'signed_in', clientId: client.id, name: nameOf(client) }
  }

  /**
   * The client account that acts for the person an identity provider signed in with this email (a
   * verified one): the client with that email, or one that lists a user with it, as signIn finds it.
   */
  async clientActingFor (
    email: string,
    until?: Cancellation
  ): Promise<{ clientId: number, name: string | null } | null> {
    const client = await this.#clientActingFor([{ email }], undefined, email, until)
    return client === null ? null : { clientId: client.id, name: nameOf(client) }
  }

  /**
   * Every client account the person with this (verified) email acts for, the ones they own first:
   * WHMCS 8's user of that email lists them (GetUsers), each named by GetClientsDetails; closed
   * ones are left out. Where there is no such user or no GetUsers (WHMCS 7), the one client
   * clientActingFor finds, if any.
   */
  async clientsActingFor (
    email: string,
    until?: Cancellation
  ): Promise<Array<{ clientId: number, name: string | null }>> {
    const ids = await this.#api.action('GetUsers', { search: email }, until, answer => clientIdsOfUser(answer, email),
      message => says(message, 'Command Not Found') ? [] : undefined)
    const details = ids.slice(0, MAX_CLIENTS_OF_A_PERSON).map((id) => this.getClientsDetails(id, until))
    const clients = (await Promise.all(details))
      .filter((client): client is ClientDetails => client !== null && client.status !== 'Closed')
    if (clients.length > 0) return clients.map((client) => ({ clientId: client.id, name: nameOf(client) }))
    const client = await this.clientActingFor(email, until)
    return client === null ? [] : [client]
  }

  async #clientActingFor (
    lookups: WhmcsParams[],
    userId: number | undefined,
    email: string,
    until?: Cancellation
  ): Promise<ClientDetails | null> {
    for (const lookup of lookups) {
      const client = await this.#api.action('GetClientsDetails', lookup, until, answer => answer,
        message => says(message, 'Client Not Found') ? null : undefined)
      if (client !== null && actsFor(client, userId, email)) return toClientDetails(client)
    }
    return null
  }

  getClientsDetails (clientId: number, until?: Cancellation): Promise<ClientDetails | null> {
    return this.#api.action('GetClientsDetails', { clientid: clientId }, until, toClientDetails,
      message => says(message, 'Client Not Found') ? null : undefined)
  }

  getInvoices ({ clientId, status, limitStart, limitNum }: InvoiceQuery, until?: Cancellation): Promise<InvoicePage> {
    // Newest first, by a unique key: WHMCS's own default order (by status and due date) is not one, so pages
    // could overlap.
    const params = {
      userid: clientId,
      status,
      limitstart: limitStart,
      limitnum: limitNum,
      orderby: 'id',
      order: 'desc'
    }
    return this.#api.action('GetInvoices', params, until, toInvoicePage)
  }

  getInvoice (invoiceId: number, until?: Cancellation): Promise<InvoiceDetails | null> {
    return this.#api.action('GetInvoice', { invoiceid: invoiceId }, until, toInvoiceDetails,
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
        this.#api.log.error(
          { upstream: 'billing', operation: 'AddOrder', failure: failure.failure },
          failure.message
        )
        throw failure
      }
      // Orders placed at the same time meet the same refusal: the first to learn of it says so.
      if (this.#fallbackPaymentMethod === tried) {
        this.#fallbackPaymentMethod = valid
        this.#api.log.warn({ upstream: 'billing', operation: 'AddOrder', refused: tried, paymentMethod: valid },
          `BILLING_PAYMENT_METHOD is not set and WHMCS refuses ${tried}: orders go with ${valid}, the first gateway it names`)
      }
      return await this.#addOrder(order, valid, false, until)
    }
  }

  /** `chosenHere`: the gateway is the client's own choice, which WHMCS may refuse without fault. */
  #addOrder (
    { clientId, productId, billingCycle }: NewOrder,
    paymentMethod: string,
    chosenHere: boolean,
    until?: Cancellation
  ): Promise<PlacedOrder> {
    const params = { clientid: clientId, pid: [productId], billingcycle: [billingCycle], paymentmethod: paymentMethod }
    return this.#api.action('AddOrder', params, until, toPlacedOrder, message => {
      if (!/^invalid payment method/i.test(message.trim())) throw new OrderRefusedError(message)
      throw chosenHere ? new GatewayRefusal(message) : new PaymentMethodRefusedError(message)
    })
  }

  /** Rejects with OrderNotPendingError when the order is not (or no longer) pending. */
  acceptOrder (orderId: number, until?: Cancellation): Promise<void> {
    return this.#api.action('AcceptOrder', { orderid: orderId }, until, () => undefined, message => {
      if (says(message, 'Order ID not found or Status not Pending')) throw new OrderNotPendingError(orderId)
      return undefined
    })
  }

  /** The order's status (`Pending`, `Active`, `Cancelled`, `Fraud`...), or null when there is no such order. */
  getOrderStatus (orderId: number, until?: Cancellation): Promise<string | null> {
    return this.#api.action('GetOrders', { id: orderId }, until, orderStatusOf)
  }

  /**
   * Cancels a pending order (WHMCS `CancelOrder`), which cancels its unpaid invoice too; no email is
   * sent. Safe to repeat: an order already cancelled is `cancelled`, one WHMCS does not know is
   * `not_found`. Rejects with OrderNotPendingError when the order went on (accepted) meanwhile.
   */
  async cancelOrder (orderId: number, until?: Cancellation): Promise<'cancelled' | 'not_found'> {
    const refused = await this.#api.action(
      'CancelOrder',
      { orderid: orderId, cancelsub: 'true', noemail: 'true' },
      until,
      () => false,
      () => true
    )
    if (!refused) return 'cancelled'
    // WHMCS's refusal does not say which it is: the order's status does.
    const status = await this.getOrderStatus(orderId, until)
    if (status === null) return 'not_found'
    if (status === 'Cancelled') return 'cancelled'
    throw new OrderNotPendingError(orderId, 'CancelOrder')
  }

  /** The client's pending orders, newest first (the most recent 100). */
  getPendingOrders (clientId: number, until?: Cancellation): Promise<BillingOrderSummary[]> {
    const params = { userid: clientId, status: 'Pending', limitnum: 100 }
    return this.#api.action('GetOrders', params, until, toOrderSummaries)
  }

  async health (until: Cancellation): Promise<void> {
    await this.#api.action('WhmcsDetails', {}, until, () => undefined)
  }

  close (): Promise<void> {
    return this.#api.close()
  }
}

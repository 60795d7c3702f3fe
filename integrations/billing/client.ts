import type { Cancellation } from '../../lib/deadline.js'
import { UpstreamFailure, UpstreamRefusal } from '../../lib/failure.js'
import { Upstream, asRecord, brief, type UpstreamOptions } from '../upstream.js'

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
export type WhmcsAnswer = Record<string, unknown>

export interface Invoice {
  id: number
  clientId: number
  invoiceNumber: string
  /** YYYY-MM-DD; null for WHMCS's "never" (0000-00-00) */
  date: string | null
  /** YYYY-MM-DD; null for WHMCS's "never" (0000-00-00) */
  dueDate: string | null
  /** YYYY-MM-DD HH:MM:SS in the billing system's time zone; null while unpaid. */
  datePaid: string | null
  subtotal: number
  credit: number
  /** Both WHMCS tax levels together. */
  tax: number
  total: number
  taxRate: number
  status: string
  paymentMethod: string
  /** GetInvoice does not say; GetInvoices does. */
  currencyCode: string | null
}

export interface InvoiceItem {
  id: number
  type: string
  /** The service, domain or addon the line bills; 0 for a free-text line. */
  relatedId: number
  description: string
  amount: number
  taxed: boolean
}

export interface InvoiceDetails extends Invoice {
  balance: number
  items: InvoiceItem[]
}

export interface InvoiceQuery {
  clientId: number
  status?: string
  limitStart?: number
  limitNum?: number
}

export interface InvoicePage {
  /** All the invoices that match, not just this page. */
  total: number
  invoices: Invoice[]
}

export interface ClientDetails {
  id: number
  firstName: string
  lastName: string
  companyName: string | null
  email: string
  status: string
  currencyCode: string | null
  credit: number
}

export interface NewOrder {
  clientId: number
  productId: number
  billingCycle: string
  paymentMethod?: string
}

export interface PlacedOrder {
  orderId: number
  /** Null when the order raised no invoice (a free product). */
  invoiceId: number | null
  serviceIds: number[]
}

export type SignIn =
  | { outcome: 'signed_in', clientId: number }
  | { outcome: 'invalid_credentials' }
  | { outcome: 'two_factor_required' }
  /** The user signed in, but no client account it acts for could be found. */
  | { outcome: 'no_client_account' }

/** WHMCS answered the action with an error (`result: error`): it refused it, for the reason its message gives. */
export class BillingRefusal extends UpstreamFailure {
  constructor (action: string, whmcsMessage: string) {
    super('upstream_error', 'billing', `${action}: ${brief(whmcsMessage) || 'error without a message'}`)
    this.name = 'BillingRefusal'
  }
}

/**
 * AddOrder refused a payment gateway that was given or configured (`Invalid Payment Method. Valid
 * options include a,b`): the service's configuration is wrong for this WHMCS, a failure of billing
 * for every order, not a refusal of this one.
 */
export class PaymentMethodRefusedError extends UpstreamFailure {
  constructor (whmcsMessage: string) {
    super('upstream_error', 'billing', `AddOrder: ${brief(whmcsMessage)}`)
    this.name = 'PaymentMethodRefusedError'
  }
}

/**
 * AddOrder refused the gateway the client chose by itself, with no BILLING_PAYMENT_METHOD set: an
 * answer naming the valid gateways, with one of which the order is placed again.
 */
class GatewayRefusal extends UpstreamRefusal {
  readonly validMethods: string[]

  constructor (readonly whmcsMessage: string) {
    super('billing', `AddOrder: ${brief(whmcsMessage)}`)
    this.name = 'GatewayRefusal'
    const [, listed = ''] = /valid options include\s*:?\s*(.*)$/i.exec(whmcsMessage) ?? []
    this.validMethods = listed.split(',').map(method => method.trim().replace(/\.$/, '')).filter(method => method !== '')
  }
}

/** AddOrder answered `result: error`: WHMCS refused this order (an unknown product, a closed client). */
export class OrderRefusedError extends UpstreamRefusal {
  constructor (whmcsMessage: string) {
    super('billing', `AddOrder: ${brief(whmcsMessage) || 'error without a message'}`)
    this.name = 'OrderRefusedError'
  }
}

/**
 * AcceptOrder on an order that is not pending (already accepted, cancelled) or that does not exist:
 * an answer about that order (a retry after a lost answer meets it), not billing failing.
 */
export class OrderNotPendingError extends UpstreamRefusal {
  constructor (readonly orderId: number) {
    super('billing', `AcceptOrder: order ${orderId} not found or not pending`)
    this.name = 'OrderNotPendingError'
  }
}

const NEVER = /^0000-00-00( 00:00:00)?$/

function malformed (field: string): UpstreamFailure {
  return new UpstreamFailure('upstream_error', 'billing', `unexpected value for ${field} in the billing answer`)
}

/** WHMCS sends numbers and money as numbers or as decimal strings, depending on the action. */
function toNumber (value: unknown, field: string): number {
  const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value
  if (typeof number !== 'number' || !Number.isFinite(number)) throw malformed(field)
  return number
}

/** WHMCS booleans arrive as booleans, 0/1 or strings ("true", "false", "1", "0"). */
function isTrue (value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 'true'
}

/** Whether a WHMCS message is this one, whatever its case, spacing or closing full stop. */
function says (message: string, expected: string): boolean {
  return message.replace(/\s+/g, ' ').trim().replace(/\.$/, '').toLowerCase() === expected.toLowerCase()
}

/** Email addresses as WHMCS compares them: without regard to case. */
function sameEmail (a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase()
}

function toText (value: unknown): string {
  return typeof value === 'string' || typeof value === 'number' ? String(value) : ''
}

function toDate (value: unknown): string | null {
  const text = toText(value)
  return text === '' || NEVER.test(text) ? null : text
}

/** A PHP list as JSON: `{"invoice": [...]}` when it has entries, but `[]` or `""` when empty. */
function listOf (container: unknown, key: string): WhmcsAnswer[] {
  const list = asRecord(container)[key]
  if (Array.isArray(list)) return list.map(asRecord)
  return typeof list === 'object' && list !== null ? [asRecord(list)] : []
}

function toInvoice (raw: WhmcsAnswer): Invoice {
  const id = toNumber(raw.id ?? raw.invoiceid, 'invoice id')
  return {
    id,
    clientId: toNumber(raw.userid, 'userid'),
    // invoicenum stays empty unless custom invoice numbering is on; WHMCS then shows the id.
    invoiceNumber: toText(raw.invoicenum) || String(id),
    date: toDate(raw.date),
    dueDate: toDate(raw.duedate),
    datePaid: toDate(raw.datepaid),
    subtotal: toNumber(raw.subtotal, 'subtotal'),
    credit: toNumber(raw.credit ?? 0, 'credit'),
    tax: toNumber(raw.tax ?? 0, 'tax') + toNumber(raw.tax2 ?? 0, 'tax2'),
    total: toNumber(raw.total, 'total'),
    taxRate: toNumber(raw.taxrate ?? 0, 'taxrate'),
    status: toText(raw.status),
    paymentMethod: toText(raw.paymentmethod),
    currencyCode: toText(raw.currencycode) || null
  }
}

function toInvoiceItem (raw: WhmcsAnswer): InvoiceItem {
  return {
    id: toNumber(raw.id, 'item id'),
    type: toText(raw.type),
    relatedId: toNumber(raw.relid ?? 0, 'relid'),
    description: toText(raw.description),
    amount: toNumber(raw.amount, 'amount'),
    taxed: isTrue(raw.taxed)
  }
}

/** The details of a GetClientsDetails answer: under `client` (documented), or at the top level (older installations). */
function clientOf (answer: WhmcsAnswer): WhmcsAnswer {
  return answer.client === undefined ? answer : asRecord(answer.client)
}

/** The users a client lists (`users.user`, WHMCS 8 and later), or undefined when it lists none (WHMCS 7). */
function usersOf (answer: WhmcsAnswer): Array<{ id: number, email: string }> | undefined {
  const users = clientOf(answer).users ?? answer.users
  return users === undefined ? undefined : listOf(users, 'user').map(user => ({ id: Number(user.id), email: toText(user.email) }))
}

function toClientDetails (answer: WhmcsAnswer): ClientDetails {
  const client = clientOf(answer)
  return {
    id: toNumber(client.id ?? client.userid, 'client id'),
    firstName: toText(client.firstname),
    lastName: toText(client.lastname),
    companyName: toText(client.companyname) || null,
    email: toText(client.email),
    status: toText(client.status),
    currencyCode: toText(client.currency_code) || null,
    credit: toNumber(client.credit ?? 0, 'credit')
  }
}

/** The WHMCS API, spoken as `POST` form fields with `responsetype=json`. */
export class BillingClient {
  readonly #upstream: Upstream
  readonly #url: string
  readonly #identifier: string
  readonly #secret: string
  readonly #configuredPaymentMethod: string | undefined
  #fallbackPaymentMethod = FALLBACK_PAYMENT_METHOD

  constructor (options: BillingClientOptions) {
    this.#upstream = new Upstream('billing', options)
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
    return this.#action('ValidateLogin', { email, password2: password }, until,
      answer => ({ userId: toNumber(answer.userid, 'userid'), twoFactorRequired: isTrue(answer.twoFactorEnabled) }),
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
    const actsFor = (answer: WhmcsAnswer): boolean => {
      if (Number(clientOf(answer).owner_user_id) === user.userId) return true
      const users = usersOf(answer)
      return users === undefined
        ? sameEmail(toText(clientOf(answer).email), email)
        : users.some(listed => listed.id === user.userId || sameEmail(listed.email, email))
    }
    for (const lookup of [{ clientid: user.userId }, { email }]) {
      const client = await this.#action('GetClientsDetails', lookup, until, answer => answer,
        message => says(message, 'Client Not Found') ? null : undefined)
      if (client !== null && actsFor(client)) return { outcome: 'signed_in', clientId: toClientDetails(client).id }
    }
    return { outcome: 'no_client_account' }
  }

  getClientsDetails (clientId: number, until?: Cancellation): Promise<ClientDetails | null> {
    return this.#action('GetClientsDetails', { clientid: clientId }, until, toClientDetails,
      message => says(message, 'Client Not Found') ? null : undefined)
  }

  getInvoices ({ clientId, status, limitStart, limitNum }: InvoiceQuery, until?: Cancellation): Promise<InvoicePage> {
    // Newest first, by a unique key: WHMCS's own default order (by status and due date) is not one, so pages could overlap.
    const params = { userid: clientId, status, limitstart: limitStart, limitnum: limitNum, orderby: 'id', order: 'desc' }
    return this.#action('GetInvoices', params, until, answer => ({
      total: toNumber(answer.totalresults, 'totalresults'),
      invoices: listOf(answer.invoices, 'invoice').map(toInvoice)
    }))
  }

  getInvoice (invoiceId: number, until?: Cancellation): Promise<InvoiceDetails | null> {
    return this.#action('GetInvoice', { invoiceid: invoiceId }, until, answer => ({
      ...toInvoice(answer),
      balance: toNumber(answer.balance, 'balance'),
      items: listOf(answer.items, 'item').map(toInvoiceItem)
    }), message => says(message, 'Invoice ID Not Found') ? null : undefined)
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
    return this.#action('AddOrder', params, until, answer => {
      const invoiceId = toNumber(answer.invoiceid ?? 0, 'invoiceid')
      return {
        orderId: toNumber(answer.orderid, 'orderid'),
        invoiceId: invoiceId === 0 ? null : invoiceId,
        serviceIds: toText(answer.serviceids).split(',').filter(id => id !== '').map(id => toNumber(id, 'serviceids'))
      }
    }, message => {
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
    return this.#action('GetOrders', { id: orderId }, until, (answer) => {
      const [order] = listOf(answer.orders, 'order')
      return order === undefined ? null : toText(order.status)
    })
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

// WHMCS answers read into the service's types: pure functions, which throw an UpstreamFailure
// (`upstream_error`) on a value they cannot read.
import { UpstreamFailure } from '../../lib/errors.js'
import { asRecord } from '../upstream.js'

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
  | { outcome: 'signed_in', clientId: number, name: string | null }
  | { outcome: 'invalid_credentials' }
  | { outcome: 'two_factor_required' }
  /** The user signed in, but no client account it acts for could be found. */
  | { outcome: 'no_client_account' }

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
export function says (message: string, expected: string): boolean {
  return message.replace(/\s+/g, ' ').trim().replace(/\.$/, '').toLowerCase() === expected.toLowerCase()
}

/** Email addresses as WHMCS compares them: without regard to case. */
function sameEmail (a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase()
}

export function toText (value: unknown): string {
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

/** A GetInvoices answer. */
export function toInvoicePage (answer: WhmcsAnswer): InvoicePage {
  return {
    total: toNumber(answer.totalresults, 'totalresults'),
    invoices: listOf(answer.invoices, 'invoice').map(toInvoice)
  }
}

/** A GetInvoice answer. */
export function toInvoiceDetails (answer: WhmcsAnswer): InvoiceDetails {
  return {
    ...toInvoice(answer),
    balance: toNumber(answer.balance, 'balance'),
    items: listOf(answer.items, 'item').map(toInvoiceItem)
  }
}

/** A ValidateLogin answer: the user, and whether it has two-factor authentication on. */
export function toValidatedLogin (answer: WhmcsAnswer): { userId: number, twoFactorRequired: boolean } {
  return { userId: toNumber(answer.userid, 'userid'), twoFactorRequired: isTrue(answer.twoFactorEnabled) }
}

/**
 * The details of a GetClientsDetails answer: under `client` (documented), or at the top level (older installations).
 */
function clientOf (answer: WhmcsAnswer): WhmcsAnswer {
  return answer.client === undefined ? answer : asRecord(answer.client)
}

/** The users a client lists (`users.user`, WHMCS 8 and later), or undefined when it lists none (WHMCS 7). */
function usersOf (answer: WhmcsAnswer): Array<{ id: number, email: string }> | undefined {
  const users = clientOf(answer).users ?? answer.users
  return users === undefined
    ? undefined
    : listOf(users, 'user').map((user) => ({ id: Number(user.id), email: toText(user.email) }))
}

/**
 * The client ids a GetUsers answer gives the user with this email (WHMCS 8: a user may act for
 * several clients, its own and those that invited it), the clients it owns first; none when no
 * user has the email.
 */
export function clientIdsOfUser (answer: WhmcsAnswer, email: string): number[] {
  const users = listOf(answer, 'users').filter(user => sameEmail(toText(user.email), email))
  const clients = users.flatMap(user => listOf(user, 'clients'))
  const owned = clients.filter(client => client.isOwner === true || client.isOwner === 1 || client.isOwner === '1')
  return [...new Set([...owned, ...clients].map(client => Number(client.id)).filter(Number.isInteger))]
}

/**
 * Whether the client of a GetClientsDetails answer acts for the user who signed in with `email`:
 * the user owns it (`owner_user_id`) or is among its users, by id or by email (WHMCS 8); where
 * clients list no users (WHMCS 7, where user and client are one), when it has the user's email.
 */
export function actsFor (answer: WhmcsAnswer, userId: number | undefined, email: string): boolean {
  if (userId !== undefined && Number(clientOf(answer).owner_user_id) === userId) return true
  const users = usersOf(answer)
  return users === undefined
    ? sameEmail(toText(clientOf(answer).email), email)
    : users.some(listed => listed.id === userId || sameEmail(listed.email, email))
}

/** A GetClientsDetails answer. */
export function toClientDetails (answer: WhmcsAnswer): ClientDetails {
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

/** An AddOrder answer. */
export function toPlacedOrder (answer: WhmcsAnswer): PlacedOrder {
  const invoiceId = toNumber(answer.invoiceid ?? 0, 'invoiceid')
  return {
    orderId: toNumber(answer.orderid, 'orderid'),
    invoiceId: invoiceId === 0 ? null : invoiceId,
    serviceIds: toText(answer.serviceids).split(',').filter(id => id !== '').map(id => toNumber(id, 'serviceids'))
  }
}

/** A client's order as GetOrders lists it. */
export interface BillingOrderSummary {
  orderId: number
  status: string
  /** Null when the order raised no invoice. */
  invoiceId: number | null
}

/** The orders a GetOrders answer lists. */
export function toOrderSummaries (answer: WhmcsAnswer): BillingOrderSummary[] {
  return listOf(answer.orders, 'order').map(order => {
    const invoiceId = toNumber(order.invoiceid ?? 0, 'invoiceid')
    return {
      orderId: toNumber(order.id, 'id'),
      status: toText(order.status),
      invoiceId: invoiceId === 0 ? null : invoiceId
    }
  })
}

/** The status of the order a GetOrders answer lists, or null when it lists none. */
export function orderStatusOf (answer: WhmcsAnswer): string | null {
  const [order] = listOf(answer.orders, 'order')
  return order === undefined ? null : toText(order.status)
}

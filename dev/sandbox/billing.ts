import { createHash } from 'node:crypto'
import { Simulator, firstIdOfRun, jsonReply, textReply } from './simulator.js'
import type { Endpoint, Fault, IncomingCall, Reply, SimulatorOptions } from './simulator.js'

export type InvoiceStatus = 'Draft' | 'Unpaid' | 'Paid' | 'Cancelled' | 'Refunded' | 'Collections' | 'Payment Pending'
export type OrderStatus = 'Pending' | 'Active' | 'Cancelled' | 'Fraud'
export type BillingCycle = 'free' | 'onetime' | 'monthly' | 'quarterly' | 'semiannually' | 'annually' | 'biennially' | 'triennially'

/**
 * A client account with the user who owns it. Since WHMCS 8 users (who sign in) are apart from
 * clients (who are billed): ValidateLogin answers the user's id, which equals the client's only
 * where an installation upgraded from WHMCS 7 made one user of each client.
 */
export interface BillingClient {
  id: number
  firstname: string
  lastname: string
  /** The client's email, which GetClientsDetails finds it by. */
  email: string
  /** The owner's password. */
  password: string
  /** The owner's user id; the client's id when not given. */
  userid?: number
  /** The owner's sign-in email, when it is not the client's. */
  userEmail?: string
  companyname?: string
  status?: 'Active' | 'Inactive' | 'Closed'
  /** The user has two-factor authentication on: ValidateLogin then says so and returns no session hash. */
  twoFactor?: boolean
  /** Users other than the owner who act for the client (WHMCS 8 invites them): each an owner's user id and sign-in email elsewhere. */
  managers?: Array<{ userid: number, email: string }>
}

export interface BillingInvoiceItem {
  description: string
  /** Money as WHMCS stores it: a decimal string such as "10.00". */
  amount: string
  type?: string
  relid?: number
  taxed?: boolean
}

export interface BillingInvoice {
  id: number
  userid: number
  /** YYYY-MM-DD */
  date: string
  /** YYYY-MM-DD */
  duedate: string
  /** YYYY-MM-DD HH:MM:SS; `0000-00-00 00:00:00` (the WHMCS "never") when absent */
  datepaid?: string
  status: InvoiceStatus
  paymentmethod: string
  items: BillingInvoiceItem[]
  invoicenum?: string
  /** Percentage applied to taxed items, e.g. "20.00". */
  taxrate?: string
  credit?: string
  notes?: string
}

export interface BillingProduct {
  pid: number
  name: string
  /** Price by billing cycle, as decimal strings. The first one is the product's default cycle. */
  pricing: Partial<Record<BillingCycle, string>>
}

export interface BillingService {
  id: number
  userid: number
  orderid: number
  pid: number
  billingcycle: BillingCycle
  status: 'Pending' | 'Active' | 'Cancelled'
}

export interface BillingOrder {
  id: number
  ordernum: string
  userid: number
  date: string
  status: OrderStatus
  paymentmethod: string
  amount: string
  invoiceid: number
  serviceids: number[]
}

export interface BillingSimulatorOptions extends SimulatorOptions {
  identifier?: string
  secret?: string
  clients?: BillingClient[]
  invoices?: BillingInvoice[]
  products?: BillingProduct[]
  paymentMethods?: string[]
  /** WHMCS version, e.g. "8.13.1" */
  version?: string
}

type Params = URLSearchParams
type Answer = Record<string, unknown>

const NEVER = '0000-00-00 00:00:00'
const ACTIONS = ['ValidateLogin', 'GetClientsDetails', 'GetUsers', 'GetInvoices', 'GetInvoice', 'AddOrder', 'AcceptOrder', 'CancelOrder', 'GetOrders', 'WhmcsDetails'] as const
type Action = typeof ACTIONS[number]
const ACTION_BY_LOWER_NAME = new Map<string, Action>(ACTIONS.map(action => [action.toLowerCase(), action]))
const SECRET_PARAMS = new Set(['identifier', 'secret', 'username', 'password', 'accesskey', 'password2'])
const CYCLES = new Set<string>(['free', 'onetime', 'monthly', 'quarterly', 'semiannually', 'annually', 'biennially', 'triennially'])
const byId = (invoice: BillingInvoice): number => invoice.id
const INVOICE_SORT_KEYS = new Map<string, (invoice: BillingInvoice) => string | number>([
  ['id', byId],
  ['invoicenumber', invoice => invoice.invoicenum ?? ''],
  ['date', invoice => invoice.date],
  ['duedate', invoice => invoice.duedate],
  ['total', invoice => invoiceTotals(invoice).totalCents],
  ['status', invoice => invoice.status]
])

export const defaultBillingClients: readonly BillingClient[] = [
  { id: 1, firstname: 'Jane', lastname: 'Doe', email: 'jane@example.com', password: 'correct-horse' },
  { id: 2, firstname: 'John', lastname: 'Smith', email: 'john@example.com', password: 'battery-staple', companyname: 'Smith Ltd' },
  // Signed up after the upgrade to WHMCS 8: their user ids are not their client ids, and Nina's is Tom's client id.
  // John manages Nina's account too: he acts for two clients.
  { id: 3, firstname: 'Nina', lastname: 'Newcomer', email: 'nina@example.com', password: 'fresh-start', userid: 4, managers: [{ userid: 2, email: 'john@example.com' }] },
  { id: 4, firstname: 'Tom', lastname: 'Guarded', email: 'tom@example.com', password: 'second-factor', twoFactor: true, userid: 5 }
]

export const defaultBillingProducts: readonly BillingProduct[] = [
  { pid: 1, name: 'Mobile 5 GB', pricing: { monthly: '10.00', annually: '100.00' } },
  { pid: 2, name: 'Mobile Unlimited', pricing: { monthly: '25.00', annually: '250.00' } },
  { pid: 3, name: 'Fibre 1 Gbit/s', pricing: { monthly: '45.50' } }
]

export const defaultBillingInvoices: readonly BillingInvoice[] = [
  { id: 1001, userid: 1, date: '2025-01-01', duedate: '2025-01-15', datepaid: '2025-01-10 09:12:44', status: 'Paid', paymentmethod: 'paypal', items: [{ type: 'Hosting', relid: 1, description: 'Mobile 5 GB (01/01/2025 - 31/01/2025)', amount: '10.00' }] },
  { id: 1002, userid: 1, date: '2025-02-01', duedate: '2025-02-15', datepaid: '2025-02-03 17:40:02', status: 'Paid', paymentmethod: 'paypal', items: [{ type: 'Hosting', relid: 1, description: 'Mobile 5 GB (01/02/2025 - 28/02/2025)', amount: '10.00' }, { type: 'Item', description: 'Roaming pass EU', amount: '4.99' }] },
  { id: 1003, userid: 1, date: '2025-03-01', duedate: '2025-03-15', status: 'Cancelled', paymentmethod: 'paypal', items: [{ type: 'Hosting', relid: 1, description: 'Mobile 5 GB (01/03/2025 - 31/03/2025)', amount: '10.00' }] },
  { id: 1004, userid: 1, date: '2025-04-01', duedate: '2025-04-15', status: 'Unpaid', paymentmethod: 'banktransfer', taxrate: '20.00', items: [{ type: 'Hosting', relid: 1, description: 'Mobile 5 GB (01/04/2025 - 30/04/2025)', amount: '10.00', taxed: true }] },
  { id: 1005, userid: 1, date: '2099-01-01', duedate: '2099-01-15', status: 'Unpaid', paymentmethod: 'paypal', items: [{ type: 'Hosting', relid: 1, description: 'Mobile 5 GB (01/01/2099 - 31/01/2099)', amount: '10.00' }] },
  { id: 2001, userid: 2, date: '2025-01-05', duedate: '2025-01-19', datepaid: '2025-01-06 11:00:00', status: 'Paid', paymentmethod: 'banktransfer', items: [{ type: 'Hosting', relid: 2, description: 'Fibre 1 Gbit/s (05/01/2025 - 04/02/2025)', amount: '45.50' }] },
  { id: 2002, userid: 2, date: '2099-02-05', duedate: '2099-02-19', status: 'Unpaid', paymentmethod: 'banktransfer', items: [{ type: 'Hosting', relid: 2, description: 'Fibre 1 Gbit/s (05/02/2099 - 04/03/2099)', amount: '45.50' }] }
]

function toCents (money: string): number {
  return Math.round(Number.parseFloat(money) * 100)
}

function money (cents: number): string {
  return (cents / 100).toFixed(2)
}

function invoiceTotals (invoice: BillingInvoice): { subtotalCents: number, taxCents: number, totalCents: number } {
  const subtotalCents = invoice.items.reduce((sum, item) => sum + toCents(item.amount), 0)
  const taxedCents = invoice.items.reduce((sum, item) => sum + (item.taxed === true ? toCents(item.amount) : 0), 0)
  const taxCents = Math.round(taxedCents * Number.parseFloat(invoice.taxrate ?? '0') / 100)
  return { subtotalCents, taxCents, totalCents: subtotalCents + taxCents - toCents(invoice.credit ?? '0') }
}

function today (): string {
  return new Date().toISOString().slice(0, 10)
}

function nowDateTime (): string {
  return new Date().toISOString().slice(0, 19).replace('T', ' ')
}

/** PHP-style list parameters: `pid=1`, `pid[]=1&pid[]=2` or `pid[0]=1&pid[1]=2`. */
function listParam (params: Params, name: string): string[] {
  const values: string[] = []
  for (const [key, value] of params) {
    if (key === name || new RegExp(`^${name}\\[\\d*\\]$`).test(key)) values.push(value)
  }
  return values
}

function intParam (params: Params, name: string): number | undefined {
  const value = params.get(name)
  return value !== null && /^\d+$/.test(value) ? Number(value) : undefined
}

function escapeXml (text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}

function toXml (value: unknown, tag: string): string {
  if (Array.isArray(value)) return value.map(item => toXml(item, tag)).join('')
  if (typeof value === 'object' && value !== null) {
    const inner = Object.entries(value).map(([key, child]) => toXml(child, key)).join('')
    return `<${tag}>${inner}</${tag}>`
  }
  return `<${tag}>${escapeXml(String(value))}</${tag}>`
}

/** WHMCS API: `POST {base}/includes/api.php`. */
export class BillingSimulator extends Simulator {
  readonly identifier: string
  readonly secret: string
  readonly version: string
  readonly paymentMethods: readonly string[]
  #clients: BillingClient[]
  #invoices: BillingInvoice[]
  #products: BillingProduct[]
  #orders: BillingOrder[] = []
  readonly #firstOrderId = firstIdOfRun()
  #services: BillingService[] = []

  constructor (options: BillingSimulatorOptions = {}) {
    super(options)
    this.identifier = options.identifier ?? 'sandbox-billing-identifier'
    this.secret = options.secret ?? 'sandbox-billing-secret'
    this.version = options.version ?? '8.13.1'
    this.paymentMethods = options.paymentMethods ?? ['paypal', 'banktransfer', 'mailin']
    this.#clients = structuredClone([...options.clients ?? defaultBillingClients])
    this.#invoices = structuredClone([...options.invoices ?? defaultBillingInvoices])
    this.#products = structuredClone([...options.products ?? defaultBillingProducts])
  }

  get apiUrl (): string {
    return `${this.url}/includes/api.php`
  }

  get orders (): readonly BillingOrder[] {
    return structuredClone(this.#orders)
  }

  get invoices (): readonly BillingInvoice[] {
    return structuredClone(this.#invoices)
  }

  protected endpoint (call: IncomingCall): Endpoint {
    if (call.path !== '/includes/api.php') {
      return {
        route: 'not-found',
        handle: () => textReply(404, 'Not Found'),
        protocolError: () => textReply(404, 'Not Found')
      }
    }
    // Like PHP's $_REQUEST: the query string and a form body both carry parameters.
    const params = new URLSearchParams(call.query)
    for (const [key, value] of new URLSearchParams(call.body.toString('utf8'))) params.append(key, value)
    const actionName = params.get('action') ?? ''
    const action = ACTION_BY_LOWER_NAME.get(actionName.toLowerCase())
    const json = params.get('responsetype') === 'json'
    const respond = (status: number, answer: Answer): Reply => json
      ? jsonReply(status, answer)
      : textReply(status, `<?xml version="1.0" encoding="utf-8"?>\n${toXml({ action: actionName.toLowerCase(), ...answer }, 'whmcsapi')}`, { 'content-type': 'text/xml;charset=UTF-8' })
    return {
      route: action ?? actionName,
      params: Object.fromEntries([...params].filter(([key]) => !SECRET_PARAMS.has(key))),
      handle: () => {
        if (!this.#authenticated(params)) return respond(403, { result: 'error', message: 'Authentication Failed' })
        if (action === undefined) return respond(200, { result: 'error', message: 'Command Not Found' })
        return respond(200, this.#run(action, params))
      },
      protocolError: (fault: Fault) => respond(fault.status ?? 200, { result: 'error', message: fault.message ?? 'An unexpected error occurred' })
    }
  }

  protected override control (call: IncomingCall): Reply | undefined {
    if (call.method === 'GET' && call.path === '/__sandbox/orders') return jsonReply(200, { orders: this.orders })
    if (call.method === 'GET' && call.path === '/__sandbox/invoices') return jsonReply(200, { invoices: this.invoices })
    return undefined
  }

  #authenticated (params: Params): boolean {
    const identifier = params.get('identifier') ?? params.get('username')
    const secret = params.get('secret') ?? params.get('password')
    return identifier === this.identifier && secret === this.secret
  }

  #run (action: Action, params: Params): Answer {
    switch (action) {
      case 'ValidateLogin': return this.#validateLogin(params)
      case 'GetClientsDetails': return this.#getClientsDetails(params)
      case 'GetUsers': return this.#getUsers(params)
      case 'GetInvoices': return this.#getInvoices(params)
      case 'GetInvoice': return this.#getInvoice(params)
      case 'AddOrder': return this.#addOrder(params)
      case 'AcceptOrder': return this.#acceptOrder(params)
      case 'CancelOrder': return this.#cancelOrder(params)
      case 'GetOrders': return this.#getOrders(params)
      case 'WhmcsDetails': return { result: 'success', whmcs: { version: this.version, canonicalversion: `${this.version}-release.1` } }
    }
  }

  #validateLogin (params: Params): Answer {
    const email = (params.get('email') ?? '').toLowerCase()
    const client = this.#clients.find(candidate => (candidate.userEmail ?? candidate.email).toLowerCase() === email)
    if (client === undefined || client.status === 'Closed' || client.password !== params.get('password2')) {
      return { result: 'error', message: 'Email or Password Invalid' }
    }
    const userid = client.userid ?? client.id
    if (client.twoFactor === true) return { result: 'success', userid, twoFactorEnabled: true }
    const passwordhash = createHash('sha256').update(`${userid}:${client.password}`).digest('hex')
    return { result: 'success', userid, passwordhash, twoFactorEnabled: false }
  }

  /** WHMCS 8's users, each with the clients it acts for; `search` matches an email, first or last name in part. */
  #getUsers (params: Params): Answer {
    const search = (params.get('search') ?? '').toLowerCase()
    const users = new Map<number, { id: number, firstname: string, lastname: string, email: string, clients: Array<{ id: number, isOwner: boolean }> }>()
    for (const client of this.#clients.filter((candidate) => candidate.status !== 'Closed')) {
      const ownerId = client.userid ?? client.id
      if (!users.has(ownerId)) users.set(ownerId, { id: ownerId, firstname: client.firstname, lastname: client.lastname, email: client.userEmail ?? client.email, clients: [] })
    }
    for (const client of this.#clients.filter((candidate) => candidate.status !== 'Closed')) {
      users.get(client.userid ?? client.id)!.clients.push({ id: client.id, isOwner: true })
      for (const { userid } of client.managers ?? []) users.get(userid)?.clients.push({ id: client.id, isOwner: false })
    }
    const found = [...users.values()].filter((user) => [user.email, user.firstname, user.lastname].some((text) => text.toLowerCase().includes(search)))
    return { result: 'success', totalresults: found.length, startnumber: 0, numreturned: found.length, users: found }
  }

  #getClientsDetails (params: Params): Answer {
    const clientid = intParam(params, 'clientid')
    const email = params.get('email')
    if (clientid === undefined && email === null) return { result: 'error', message: 'Either clientid Or email Is Required' }
    const client = this.#clients.find(candidate => clientid !== undefined
      ? candidate.id === clientid
      : candidate.email.toLowerCase() === email?.toLowerCase())
    if (client === undefined) return { result: 'error', message: 'Client Not Found' }
    const details = {
      userid: client.id,
      id: client.id,
      owner_user_id: client.userid ?? client.id,
      uuid: `00000000-0000-4000-8000-${String(client.id).padStart(12, '0')}`,
      firstname: client.firstname,
      lastname: client.lastname,
      fullname: `${client.firstname} ${client.lastname}`,
      companyname: client.companyname ?? '',
      email: client.email,
      address1: '1 Sandbox Street',
      address2: '',
      city: 'Testville',
      fullstate: 'Testshire',
      state: 'Testshire',
      postcode: 'TE5 5ST',
      countrycode: 'GB',
      country: 'GB',
      countryname: 'United Kingdom',
      phonecc: 44,
      phonenumber: '01234567890',
      phonenumberformatted: '+44.1234567890',
      billingcid: 0,
      notes: '',
      currency: 1,
      currency_code: 'GBP',
      defaultgateway: '',
      groupid: 0,
      status: client.status ?? 'Active',
      credit: '0.00',
      taxexempt: false,
      language: '',
      lastlogin: 'No Login Logged',
      email_verified: false,
      // WHMCS 8: the users who may act for the client: its owner, and those it invited.
      users: {
        user: [
          { id: client.userid ?? client.id, name: `${client.firstname} ${client.lastname}`, email: client.userEmail ?? client.email, is_owner: true },
          ...(client.managers ?? []).map(({ userid, email }) => ({ id: userid, name: email, email, is_owner: false }))
        ]
      }
    }
    return { result: 'success', ...details, client: details }
  }

  #getInvoices (params: Params): Answer {
    const userid = intParam(params, 'userid')
    const status = params.get('status')
    const limitstart = intParam(params, 'limitstart') ?? 0
    const limitnum = intParam(params, 'limitnum') ?? 25
    const sortKey = INVOICE_SORT_KEYS.get(params.get('orderby') ?? 'id') ?? byId
    const direction = params.get('order')?.toLowerCase() === 'desc' ? -1 : 1
    const matching = this.#invoices
      .filter(invoice => userid === undefined || invoice.userid === userid)
      .filter(invoice => status === null || status === '' ||
        (status === 'Overdue' ? invoice.status === 'Unpaid' && invoice.duedate < today() : invoice.status === status))
      .sort((a, b) => {
        const [left, right] = [sortKey(a), sortKey(b)]
        return (left < right ? -1 : left > right ? 1 : 0) * direction
      })
    const page = matching.slice(limitstart, limitstart + limitnum)
    return {
      result: 'success',
      totalresults: matching.length,
      startnumber: limitstart,
      numreturned: page.length,
      // An empty PHP array serialises as [], not as {"invoice": []}.
      invoices: page.length === 0 ? [] : { invoice: page.map(invoice => this.#invoiceSummary(invoice)) }
    }
  }

  #invoiceSummary (invoice: BillingInvoice): Answer {
    const client = this.#clients.find(candidate => candidate.id === invoice.userid)
    const { subtotalCents, taxCents, totalCents } = invoiceTotals(invoice)
    return {
      id: invoice.id,
      userid: invoice.userid,
      firstname: client?.firstname ?? '',
      lastname: client?.lastname ?? '',
      companyname: client?.companyname ?? '',
      invoicenum: invoice.invoicenum ?? '',
      date: invoice.date,
      duedate: invoice.duedate,
      datepaid: invoice.datepaid ?? NEVER,
      last_capture_attempt: NEVER,
      date_refunded: NEVER,
      date_cancelled: NEVER,
      subtotal: money(subtotalCents),
      credit: invoice.credit ?? '0.00',
      tax: money(taxCents),
      tax2: '0.00',
      total: money(totalCents),
      taxrate: invoice.taxrate ?? '0.00',
      taxrate2: '0.00',
      status: invoice.status,
      paymentmethod: invoice.paymentmethod,
      paymethodid: null,
      notes: invoice.notes ?? '',
      currencycode: 'GBP',
      currencyprefix: '£',
      currencysuffix: ' GBP'
    }
  }

  #getInvoice (params: Params): Answer {
    const invoiceid = intParam(params, 'invoiceid')
    const invoice = this.#invoices.find(candidate => candidate.id === invoiceid)
    // As WHMCS answers it: `status`, not `result`, says the error here.
    if (invoice === undefined) return { status: 'error', message: 'Invoice ID Not Found' }
    const { subtotalCents, taxCents, totalCents } = invoiceTotals(invoice)
    const paid = invoice.status === 'Paid'
    // GetInvoice reads its row as strings, unlike GetInvoices: ids come back as "1001".
    return {
      result: 'success',
      invoiceid: String(invoice.id),
      invoicenum: invoice.invoicenum ?? '',
      userid: String(invoice.userid),
      date: invoice.date,
      duedate: invoice.duedate,
      datepaid: invoice.datepaid ?? NEVER,
      lastcaptureattempt: NEVER,
      subtotal: money(subtotalCents),
      credit: invoice.credit ?? '0.00',
      tax: money(taxCents),
      tax2: '0.00',
      total: money(totalCents),
      balance: paid ? '0.00' : money(totalCents),
      taxrate: invoice.taxrate ?? '0.00',
      taxrate2: '0.00',
      status: invoice.status,
      paymentmethod: invoice.paymentmethod,
      notes: invoice.notes ?? '',
      ccgateway: false,
      items: {
        item: invoice.items.map((item, index) => ({
          id: String(invoice.id * 10 + index),
          type: item.type ?? 'Item',
          relid: String(item.relid ?? 0),
          description: item.description,
          amount: item.amount,
          taxed: item.taxed === true ? '1' : '0'
        }))
      },
      transactions: paid
        ? {
            transaction: [{
              id: String(invoice.id),
              userid: String(invoice.userid),
              currency: '0',
              gateway: invoice.paymentmethod,
              date: invoice.datepaid ?? NEVER,
              description: 'Invoice Payment',
              amountin: money(totalCents),
              fees: '0.00',
              amountout: '0.00',
              rate: '1.00000',
              transid: `TX${invoice.id}`,
              invoiceid: String(invoice.id),
              refundid: '0'
            }]
          }
        : ''
    }
  }

  #addOrder (params: Params): Answer {
    const client = this.#clients.find(candidate => candidate.id === intParam(params, 'clientid'))
    if (client === undefined) return { result: 'error', message: 'Client ID Not Found' }
    if (client.status === 'Closed') return { result: 'error', message: 'Unable to add order when client status is Closed' }
    const paymentmethod = params.get('paymentmethod') ?? ''
    if (!this.paymentMethods.includes(paymentmethod)) {
      return { result: 'error', message: `Invalid Payment Method. Valid options include ${this.paymentMethods.join(',')}` }
    }
    const products = listParam(params, 'pid').map(pid => this.#products.find(candidate => String(candidate.pid) === pid))
    if (products.length === 0 || !products.every(product => product !== undefined)) {
      return { result: 'error', message: 'No items added to cart so order cannot proceed' }
    }
    const cycles = listParam(params, 'billingcycle')
    const orderid = Math.max(this.#firstOrderId - 1, ...this.#orders.map(order => order.id)) + 1
    const firstServiceId = Math.max(0, ...this.#services.map(service => service.id)) + 1
    const invoiceid = Math.max(0, ...this.#invoices.map(invoice => invoice.id)) + 1
    const items: BillingInvoiceItem[] = products.map((product, index) => {
      const requested = (cycles[index] ?? cycles[0] ?? '').toLowerCase()
      // WHMCS falls back to the product's own cycle when the requested one is not offered.
      const billingcycle = (CYCLES.has(requested) && product.pricing[requested as BillingCycle] !== undefined
        ? requested
        : Object.keys(product.pricing)[0] ?? 'free') as BillingCycle
      const serviceId = firstServiceId + index
      this.#services.push({ id: serviceId, userid: client.id, orderid, pid: product.pid, billingcycle, status: 'Pending' })
      return { type: 'Hosting', relid: serviceId, description: `${product.name} (${billingcycle})`, amount: product.pricing[billingcycle] ?? '0.00' }
    })
    const serviceids = items.map(item => item.relid ?? 0)
    const duedate = new Date(Date.now() + 7 * 86_400_000).toISOString().slice(0, 10)
    this.#invoices.push({ id: invoiceid, userid: client.id, date: today(), duedate, status: 'Unpaid', paymentmethod, items })
    this.#orders.push({
      id: orderid,
      ordernum: String(1_000_000_000 + orderid * 7919),
      userid: client.id,
      date: nowDateTime(),
      status: 'Pending',
      paymentmethod,
      amount: money(items.reduce((sum, item) => sum + toCents(item.amount), 0)),
      invoiceid,
      serviceids
    })
    return { result: 'success', orderid, serviceids: serviceids.join(','), addonids: '', domainids: '', invoiceid }
  }

  /**
   * GetOrders by `id`, `userid` and `status`, newest first, `limitstart`/`limitnum` (25 by default)
   * paging; WHMCS answers `orders: {order: [...]}`, or `orders: []` when none match.
   */
  #getOrders (params: Params): Answer {
    const id = params.has('id') ? intParam(params, 'id') : undefined
    const userid = params.has('userid') ? intParam(params, 'userid') : undefined
    const status = params.get('status')
    const limitstart = intParam(params, 'limitstart') ?? 0
    const limitnum = intParam(params, 'limitnum') ?? 25
    const matching = this.#orders
      .filter(order => (id === undefined || order.id === id) && (userid === undefined || order.userid === userid) &&
        (status === null || status === '' || order.status === status))
      .sort((a, b) => b.id - a.id)
    const orders = matching.slice(limitstart, limitstart + limitnum)
    return {
      result: 'success',
      totalresults: matching.length,
      startnumber: limitstart,
      numreturned: orders.length,
      orders: orders.length === 0 ? [] : { order: orders.map(order => ({ ...order, serviceids: order.serviceids.join(',') })) }
    }
  }

  /**
   * CancelOrder of a pending order: the order and its services become Cancelled, and so does its
   * invoice while unpaid. `cancelsub` (cancel a gateway subscription) and `noemail` are taken;
   * the sandbox has neither subscriptions nor email.
   */
  #cancelOrder (params: Params): Answer {
    const order = this.#orders.find(candidate => candidate.id === intParam(params, 'orderid'))
    if (order === undefined) return { result: 'error', message: 'Order ID Not Found' }
    if (order.status !== 'Pending') return { result: 'error', message: 'Order status not Pending' }
    order.status = 'Cancelled'
    for (const service of this.#services) {
      if (service.orderid === order.id) service.status = 'Cancelled'
    }
    const invoice = this.#invoices.find(candidate => candidate.id === order.invoiceid)
    if (invoice !== undefined && invoice.status === 'Unpaid') invoice.status = 'Cancelled'
    return { result: 'success' }
  }

  #acceptOrder (params: Params): Answer {
    const order = this.#orders.find(candidate => candidate.id === intParam(params, 'orderid'))
    if (order === undefined || order.status !== 'Pending') return { result: 'error', message: 'Order ID not found or Status not Pending' }
    order.status = 'Active'
    for (const service of this.#services) {
      if (service.orderid === order.id) service.status = 'Active'
    }
    return { result: 'success' }
  }
}

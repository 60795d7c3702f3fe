import t, { type Test } from 'tap'
import { BillingClient, type BillingClientOptions } from '../../../integrations/billing/client.js'
import { OrderNotPendingError, OrderRefusedError, PaymentMethodRefusedError } from '../../../integrations/billing/errors.js'
import { BillingSimulator } from '../../../dev/sandbox/billing.js'
import { startSandbox } from '../../../dev/sandbox/index.js'
import { json, stubServer } from '../../helpers/http-stub.js'
import { leaks, readable, recorder, upstreamClients } from '../../helpers/integrations.js'

const sandbox = await startSandbox()
const { billing } = sandbox
const { recorded, errors, client, failure, closeClients } = upstreamClients((options: Partial<BillingClientOptions>, { log, onCall }) => new BillingClient({
  url: sandbox.settings.BILLING_API_URL ?? '',
  identifier: sandbox.settings.BILLING_API_IDENTIFIER ?? '',
  secret: sandbox.settings.BILLING_API_SECRET ?? '',
  log,
  onCall,
  ...options
}))
t.teardown(async () => {
  await closeClients()
  await sandbox.close()
})

const whmcs = client()

t.afterEach(() => billing.clearFaults())

t.test('ValidateLogin: the user id, or null for a wrong email or password; whether a second factor is required', async t => {
  t.same(await whmcs.validateLogin('jane@example.com', 'correct-horse'), { userId: 1, twoFactorRequired: false })
  t.same(await whmcs.validateLogin('tom@example.com', 'second-factor'), { userId: 5, twoFactorRequired: true })
  t.equal(await whmcs.validateLogin('jane@example.com', 'wrong-password'), null)
  t.equal(await whmcs.validateLogin('nobody@example.com', 'correct-horse'), null)
  t.match(recorded.calls.at(-1), { upstream: 'billing', operation: 'ValidateLogin', outcome: 'ok' }, 'a refused login is an answer, not a failure')
})

t.test('signIn: the client account a WHMCS 8 user acts for, never a client that merely has the user id', async t => {
  const actionsOf = (run: () => Promise<unknown>) => async () => {
    billing.resetCalls()
    const result = await run()
    return { result, actions: billing.calls.map(call => [call.route, call.params?.clientid ?? call.params?.email]) }
  }
  t.same(await actionsOf(() => whmcs.signIn('jane@example.com', 'correct-horse'))(), {
    result: { outcome: 'signed_in', clientId: 1, name: 'Jane Doe' },
    actions: [['ValidateLogin', 'jane@example.com'], ['GetClientsDetails', '1']]
  }, 'user 1 owns client 1, which has her email')
  t.same(await actionsOf(() => whmcs.signIn('nina@example.com', 'fresh-start'))(), {
    result: { outcome: 'signed_in', clientId: 3, name: 'Nina Newcomer' },
    actions: [['ValidateLogin', 'nina@example.com'], ['GetClientsDetails', '4'], ['GetClientsDetails', 'nina@example.com']]
  }, 'user 4: client 4 is Tom, so the client with her email')
  t.same(await actionsOf(() => whmcs.signIn('tom@example.com', 'second-factor'))(), {
    result: { outcome: 'two_factor_required' },
    actions: [['ValidateLogin', 'tom@example.com']]
  }, 'no client is looked up before the second factor')
  t.same(await whmcs.signIn('jane@example.com', 'wrong-password'), { outcome: 'invalid_credentials' })

  const invited = new BillingSimulator({
    clients: [
      { id: 7, firstname: 'Acme', lastname: 'Accounts', email: 'accounts@acme.example', userEmail: 'ops@acme.example', userid: 7, password: 'ops-password' },
      { id: 8, firstname: 'Shared', lastname: 'Inbox', email: 'team@acme.example', userEmail: 'lead@acme.example', userid: 10, password: 'lead-password' },
      { id: 20, firstname: 'Side', lastname: 'Project', email: 'side@acme.example', userEmail: 'team@acme.example', userid: 9, password: 'team-password' }
    ]
  })
  await invited.start()
  const acme = client({ url: invited.apiUrl, identifier: invited.identifier, secret: invited.secret })
  t.teardown(() => invited.close())
  t.same(await acme.signIn('ops@acme.example', 'ops-password'), { outcome: 'signed_in', clientId: 7, name: 'Acme Accounts' },
    'user 7 signs in with an email of its own: client 7 lists it among its users')
  t.same(await acme.signIn('team@acme.example', 'team-password'), { outcome: 'no_client_account' },
    'user 9: no client 9, and client 8, which has its email, does not list it')
  t.same(await whmcs.clientActingFor('jane@example.com'), { clientId: 1, name: 'Jane Doe' }, 'signed in at a provider: the client with her email')
  t.equal(await acme.clientActingFor('team@acme.example'), null, 'the client with the email does not list that user: it does not act for them')
  t.equal(await acme.clientActingFor('nobody@acme.example'), null)

  // WHMCS 8: a user acts for the clients GetUsers lists with it, its own first.
  t.same(await whmcs.clientsActingFor('john@example.com'), [{ clientId: 2, name: 'John Smith' }, { clientId: 3, name: 'Nina Newcomer' }], 'John owns client 2 and manages client 3')
  t.same(await whmcs.clientsActingFor('JANE@example.com'), [{ clientId: 1, name: 'Jane Doe' }], 'one client')
  t.same(await whmcs.clientsActingFor('nobody@example.com'), [])
  t.same(await acme.clientsActingFor('team@acme.example'), [{ clientId: 20, name: 'Side Project' }], 'by the user\'s email, not the client\'s')
  // WHMCS 7 has no GetUsers: the client with the email, as before.
  billing.injectFault({ kind: 'error', route: 'GetUsers', message: 'Command Not Found', times: 1 })
  t.same(await whmcs.clientsActingFor('john@example.com'), [{ clientId: 2, name: 'John Smith' }], 'without GetUsers, the client with the email')
  invited.injectFault({ kind: 'http5xx', route: 'GetClientsDetails', status: 502 })
  t.match(await failure(acme.signIn('ops@acme.example', 'ops-password')), { failure: 'http_5xx' }, 'a failed lookup is a failure, not a sign-in')
})

/** A WHMCS that answers each action with the given JSON (or an error answer when none is given). */
async function whmcsAnswering (t: Test, answers: Record<string, (form: URLSearchParams) => object>) {
  const url = await stubServer(t, (_request, body) => {
    const form = new URLSearchParams(body)
    return json(200, answers[form.get('action') ?? '']?.(form) ?? { result: 'error', message: 'Command Not Found' })
  })
  return client({ url: `${url}/includes/api.php` })
}

t.test('signIn: a client the user owns (owner_user_id) or that lists her by the email just checked, whatever ids the lists use', async t => {
  const signInWith = async (client: object, topLevel: object = {}) => {
    const whmcs = await whmcsAnswering(t, {
      ValidateLogin: () => ({ result: 'success', userid: '1', passwordhash: 'x', twoFactorEnabled: false }),
      GetClientsDetails: (form) => form.get('clientid') === '1' ? { result: 'success', client, ...topLevel } : { result: 'error', message: 'Client Not Found' }
    })
    const outcome = await whmcs.signIn('jane@example.com', 'correct-horse')
    await whmcs.close()
    return outcome
  }
  t.same(await signInWith({ id: '1', email: 'accounts@example.com', users: { user: [{ id: '55', email: 'Jane@Example.com' }] } }),
    { outcome: 'signed_in', clientId: 1, name: null }, 'listed by her email, under another user id')
  t.same(await signInWith({ id: '1', email: 'accounts@example.com' }, { users: { user: [{ id: '55', email: 'jane@example.com' }] } }),
    { outcome: 'signed_in', clientId: 1, name: null }, 'listed by her email beside the client rather than in it')
  t.same(await signInWith({ id: '1', email: 'accounts@example.com', owner_user_id: 1 }), { outcome: 'signed_in', clientId: 1, name: null }, 'owned by her')
  t.same(await signInWith({ id: '1', email: 'accounts@example.com', owner_user_id: 2, users: { user: [{ id: '2', email: 'boss@example.com' }] } }),
    { outcome: 'no_client_account' }, 'neither owned by her nor listing her')
})

t.test('the messages that mean "no such thing" are read whatever their case or closing full stop', async t => {
  const whmcs = await whmcsAnswering(t, {
    ValidateLogin: () => ({ result: 'error', message: 'email or password invalid.' }),
    GetClientsDetails: () => ({ result: 'error', message: 'Client not found' }),
    GetInvoice: () => ({ status: 'error', message: ' INVOICE  ID NOT FOUND ' }),
    AcceptOrder: () => ({ result: 'error', message: 'Order ID Not Found or Status Not Pending.' })
  })
  t.equal(await whmcs.validateLogin('jane@example.com', 'x'), null)
  t.equal(await whmcs.getClientsDetails(1), null)
  t.equal(await whmcs.getInvoice(1), null)
  t.type(await failure(whmcs.acceptOrder(1)), OrderNotPendingError)
  await whmcs.close()
})

t.test('GetInvoices: money as numbers, the WHMCS "never" as null', async t => {
  const { total, invoices } = await whmcs.getInvoices({ clientId: 1 })
  t.equal(total, 5)
  t.equal(invoices.length, 5)
  t.same(invoices.find(invoice => invoice.id === 1001), {
    id: 1001,
    clientId: 1,
    invoiceNumber: '1001',
    date: '2025-01-01',
    dueDate: '2025-01-15',
    datePaid: '2025-01-10 09:12:44',
    subtotal: 10,
    credit: 0,
    tax: 0,
    total: 10,
    taxRate: 0,
    status: 'Paid',
    paymentMethod: 'paypal',
    currencyCode: 'GBP'
  })
  t.match(invoices.find(invoice => invoice.id === 1004), { datePaid: null, subtotal: 10, tax: 2, total: 12, taxRate: 20, status: 'Unpaid' })
  t.equal(invoices.find(invoice => invoice.id === 1003)?.datePaid, null, '0000-00-00 00:00:00 is null')

  const undated = new BillingSimulator({
    clients: [{ id: 1, firstname: 'Una', lastname: 'Dated', email: 'una@example.com', password: 'no-dates' }],
    invoices: [{ id: 1, userid: 1, date: '0000-00-00', duedate: '0000-00-00', status: 'Draft', paymentmethod: 'banktransfer', items: [{ type: 'Item', description: 'Draft', amount: '1.00' }] }]
  })
  await undated.start()
  t.teardown(() => undated.close())
  const drafts = client({ url: undated.apiUrl, identifier: undated.identifier, secret: undated.secret })
  t.match((await drafts.getInvoices({ clientId: 1 })).invoices, [{ id: 1, date: null, dueDate: null }], 'a date of 0000-00-00 is null too')
})

t.test('GetInvoices: an empty list comes as [] and is no error', async t => {
  t.same(await whmcs.getInvoices({ clientId: 3 }), { total: 0, invoices: [] })
})

t.test('GetInvoices: status and paging are passed on, newest first by id', async t => {
  billing.resetCalls()
  const paid = await whmcs.getInvoices({ clientId: 1, status: 'Paid' })
  t.same(paid.invoices.map(invoice => invoice.id), [1002, 1001])
  t.match(billing.calls.at(-1)?.params, { orderby: 'id', order: 'desc' }, 'the order asked for, not left to WHMCS\'s default')
  const page = await whmcs.getInvoices({ clientId: 1, limitStart: 1, limitNum: 2 })
  t.equal(page.total, 5, 'total counts every match')
  t.same(page.invoices.map(invoice => invoice.id), [1004, 1003])
})

t.test('GetInvoice: ids as numbers, its items, null when there is no such invoice', async t => {
  const invoice = await whmcs.getInvoice(1002)
  t.match(invoice, { id: 1002, clientId: 1, subtotal: 14.99, total: 14.99, balance: 0, datePaid: '2025-02-03 17:40:02', currencyCode: null })
  t.same(invoice?.items.map(item => [item.id, item.type, item.amount, item.taxed]), [[10020, 'Hosting', 10, false], [10021, 'Item', 4.99, false]])
  t.equal((await whmcs.getInvoice(1004))?.balance, 12)
  t.equal(await whmcs.getInvoice(999_999), null)
})

t.test('GetClientsDetails: the client, or null', async t => {
  t.match(await whmcs.getClientsDetails(2), {
    id: 2, firstName: 'John', lastName: 'Smith', companyName: 'Smith Ltd', email: 'john@example.com', status: 'Active', currencyCode: 'GBP', credit: 0
  })
  t.equal((await whmcs.getClientsDetails(1))?.companyName, null)
  t.equal(await whmcs.getClientsDetails(999), null)
})

t.test('AddOrder then AcceptOrder; a second AcceptOrder is recognisably "not pending"', async t => {
  const order = await whmcs.addOrder({ clientId: 2, productId: 2, billingCycle: 'annually', paymentMethod: 'paypal' })
  t.match(order, { orderId: Number, invoiceId: Number })
  t.equal(order.serviceIds.length, 1)
  t.match(billing.calls.at(-1)?.params, { 'pid[0]': '2', 'billingcycle[0]': 'annually', paymentmethod: 'paypal' }, 'lists as PHP reads them')
  t.match(billing.orders.find(candidate => candidate.id === order.orderId), { status: 'Pending', invoiceid: order.invoiceId })
  t.equal(billing.invoices.find(invoice => invoice.id === order.invoiceId)?.items[0]?.amount, '250.00', 'the annual price')

  await whmcs.acceptOrder(order.orderId)
  t.equal(billing.orders.find(candidate => candidate.id === order.orderId)?.status, 'Active')
  const again = await failure(whmcs.acceptOrder(order.orderId))
  t.type(again, OrderNotPendingError)
  t.match(again, { failure: 'upstream_error', upstream: 'billing', orderId: order.orderId })
  t.match(recorded.calls.at(-1), { operation: 'AcceptOrder', outcome: 'ok' }, 'an answer about the order, not a billing failure')
  t.match(recorded.lines.at(-1), { level: 'warn', details: { refused: true } })
  t.type(await failure(whmcs.acceptOrder(999_999)), OrderNotPendingError)
})

t.test('CancelOrder: the order and its unpaid invoice become Cancelled, without email; again, or of an unknown order, an answer; of an accepted one, not pending', async t => {
  const order = await whmcs.addOrder({ clientId: 2, productId: 1, billingCycle: 'monthly', paymentMethod: 'paypal' })
  const other = await whmcs.addOrder({ clientId: 2, productId: 2, billingCycle: 'monthly', paymentMethod: 'paypal' })
  t.same((await whmcs.getPendingOrders(2)).slice(0, 2).map(pending => pending.orderId), [other.orderId, order.orderId], 'the client\'s pending orders, newest first')
  t.equal(await whmcs.cancelOrder(order.orderId), 'cancelled')
  t.match(billing.calls.find(call => call.route === 'CancelOrder')?.params, { orderid: String(order.orderId), cancelsub: 'true', noemail: 'true' })
  t.equal(billing.orders.find(candidate => candidate.id === order.orderId)?.status, 'Cancelled')
  t.equal(billing.invoices.find(invoice => invoice.id === order.invoiceId)?.status, 'Cancelled', 'its invoice too, as WHMCS does')
  t.notOk((await whmcs.getPendingOrders(2)).some(pending => pending.orderId === order.orderId), 'no longer pending')
  t.equal(await whmcs.cancelOrder(order.orderId), 'cancelled', 'a repeated cancel is an answer: it is cancelled')
  t.equal(await whmcs.cancelOrder(999_999), 'not_found')
  await whmcs.acceptOrder(other.orderId)
  t.type(await failure(whmcs.cancelOrder(other.orderId)), OrderNotPendingError, 'an accepted order cannot be cancelled')
  t.equal(billing.invoices.find(invoice => invoice.id === other.invoiceId)?.status, 'Unpaid')
})

t.test('AddOrder refused (result=error): OrderRefusedError, an answer logged at warn, not a failure', async t => {
  const refused = await failure(whmcs.addOrder({ clientId: 1, productId: 999_999, billingCycle: 'monthly' }))
  t.type(refused, OrderRefusedError)
  t.match(refused, { failure: 'upstream_error', upstream: 'billing', message: /^AddOrder: / })
  t.match(recorded.calls.at(-1), { operation: 'AddOrder', outcome: 'ok' })
  t.match(recorded.lines.at(-1), { level: 'warn', details: { upstream: 'billing', operation: 'AddOrder', refused: true } })
})

t.test('AddOrder uses the default payment method when given none', async t => {
  const order = await client({ defaultPaymentMethod: 'paypal' }).addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
  t.equal(billing.orders.find(candidate => candidate.id === order.orderId)?.paymentmethod, 'paypal')
  const unset = await client().addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
  t.equal(billing.orders.find(candidate => candidate.id === unset.orderId)?.paymentmethod, 'mailin', 'none configured: mailin')
})

t.test('AddOrder with no payment method configured, mailin not active: the first gateway WHMCS names, from then on', async t => {
  const paypalOnly = new BillingSimulator({ paymentMethods: ['paypal', 'stripe'] })
  await paypalOnly.start()
  t.teardown(() => paypalOnly.close())
  const whmcs = client({ url: paypalOnly.apiUrl, identifier: paypalOnly.identifier, secret: paypalOnly.secret })
  const first = await whmcs.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
  t.same(paypalOnly.calls.filter(call => call.route === 'AddOrder').map(call => call.params?.paymentmethod), ['mailin', 'paypal'], 'mailin refused, then paypal')
  t.equal(paypalOnly.orders.find(candidate => candidate.id === first.orderId)?.paymentmethod, 'paypal')
  t.match(recorded.lines.filter(line => line.level === 'warn').at(-1), { details: { refused: 'mailin', paymentMethod: 'paypal' }, message: /BILLING_PAYMENT_METHOD is not set/ })
  t.same(recorded.calls.slice(-2).map(call => call.outcome), ['ok', 'ok'], 'the refused gateway is an answer, not a billing failure')
  t.notOk(recorded.lines.some(line => line.level === 'error' && /Invalid Payment Method/.test(line.message)), 'nothing logged at error')
  paypalOnly.resetCalls()
  await whmcs.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
  t.same(paypalOnly.calls.map(call => call.params?.paymentmethod), ['paypal'], 'the next order goes with paypal at once')

  const warnings = () => recorded.lines.filter(line => /BILLING_PAYMENT_METHOD is not set/.test(line.message)).length
  const before = warnings()
  const another = client({ url: paypalOnly.apiUrl, identifier: paypalOnly.identifier, secret: paypalOnly.secret })
  const placed = await Promise.all([1, 2, 3].map(() => another.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })))
  t.equal(placed.length, 3, 'orders placed at the same time all go through')
  t.equal(warnings(), before + 1, 'and the change of gateway is said once')
})

t.test('AddOrder with a configured payment method WHMCS refuses: PaymentMethodRefusedError, a billing failure, never another gateway', async t => {
  const paypalOnly = new BillingSimulator({ paymentMethods: ['paypal'] })
  await paypalOnly.start()
  t.teardown(() => paypalOnly.close())
  const whmcs = client({ url: paypalOnly.apiUrl, identifier: paypalOnly.identifier, secret: paypalOnly.secret, defaultPaymentMethod: 'banktransfer' })
  const refused = await failure(whmcs.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' }))
  t.type(refused, PaymentMethodRefusedError)
  t.match(refused, { failure: 'upstream_error', message: 'AddOrder: Invalid Payment Method. Valid options include paypal' })
  t.match(recorded.calls.at(-1), { operation: 'AddOrder', outcome: 'upstream_error' }, 'counted as billing failing')
  t.match(recorded.lines.at(-1), { level: 'error', details: { operation: 'AddOrder' } })
  t.equal(paypalOnly.orders.length, 0, 'no order placed')
  t.same(paypalOnly.calls.filter(call => call.route === 'AddOrder').length, 1, 'not retried with another gateway')
})

t.test('health: WhmcsDetails', async t => {
  await whmcs.health(AbortSignal.timeout(1000))
  t.match(recorded.calls.at(-1), { operation: 'WhmcsDetails', outcome: 'ok' })
})

t.test('call: any action, with its raw answer', async t => {
  const answer = await whmcs.call<{ result: string, whmcs: { version: string } }>('WhmcsDetails')
  t.equal(answer.whmcs.version, billing.version)
  t.match(await failure(whmcs.call('NoSuchAction')), { failure: 'upstream_error', message: /Command Not Found/ })
})

t.test('an error answer: upstream_error with its message', async t => {
  billing.injectFault({ kind: 'error', route: 'GetInvoices', message: 'Database connection failed', times: 1 })
  const error = await failure(whmcs.getInvoices({ clientId: 1 }))
  t.match(error, { failure: 'upstream_error', upstream: 'billing', message: 'GetInvoices: Database connection failed' })
  t.match(recorded.calls.at(-1), { operation: 'GetInvoices', outcome: 'upstream_error' })
  t.match(recorded.lines.at(-1), { level: 'error', details: { upstream: 'billing', operation: 'GetInvoices', failure: 'upstream_error' } }, 'an error in the error log, as the specification says')
})

t.test('wrong credentials: auth_failed', async t => {
  const wrong = client({ secret: 'not-the-secret' })
  const error = await failure(wrong.getInvoices({ clientId: 1 }))
  t.match(error, { failure: 'auth_failed' })
  t.match(await failure(wrong.health(AbortSignal.timeout(1000))), { failure: 'auth_failed' })
  t.notMatch(error.message, /not-the-secret/)
})

t.test('an "Authentication Failed" answer with HTTP 200, or another refusal of the credentials or the host: auth_failed', async t => {
  for (const message of ['Authentication Failed', 'Invalid or missing credentials', 'Invalid IP 203.0.113.9', 'Invalid Access Key', 'IP Banned']) {
    billing.injectFault({ kind: 'error', message, times: 1 })
    t.match(await failure(whmcs.health(AbortSignal.timeout(1000))), { failure: 'auth_failed' }, message)
  }
})

t.test('HTTP 401: auth_failed', async t => {
  const url = await stubServer(t, () => json(401, { result: 'error', message: 'Invalid or missing credentials' }))
  const refusing = client({ url: `${url}/includes/api.php` })
  t.match(await failure(refusing.health(AbortSignal.timeout(1000))), { failure: 'auth_failed', message: 'WhmcsDetails: refused the API credentials (HTTP 401)' })
  await refusing.close()
})

t.test('HTTP 5xx: http_5xx', async t => {
  billing.injectFault({ kind: 'http5xx', status: 503, body: '{"result":"error","message":"maintenance"}', times: 1 })
  t.match(await failure(whmcs.getInvoice(1001)), { failure: 'http_5xx', message: 'GetInvoice: HTTP 503' })
  t.match(recorded.calls.at(-1), { operation: 'GetInvoice', outcome: 'http_5xx' })
})

t.test('a body that is not JSON: upstream_error, the body left out', async t => {
  const url = await stubServer(t, () => ({ status: 200, headers: { 'content-type': 'text/html' }, body: '<html>Maintenance: secret-page-content</html>' }))
  const html = client({ url: `${url}/includes/api.php` })
  const error = await failure(html.health(AbortSignal.timeout(1000)))
  t.match(error, { failure: 'upstream_error', message: 'WhmcsDetails: HTTP 200 answer is not JSON' })
  await html.close()
})

t.test('a black hole: timeout, within timeoutMs', async t => {
  const quick = client({ timeoutMs: 300 })
  billing.injectFault({ kind: 'blackhole', times: 1 })
  // The black hole never answers: the client's own 300 ms deadline ended the call, as its message says.
  const error = await failure(quick.getInvoices({ clientId: 1 }))
  t.match(error, { failure: 'timeout', message: 'GetInvoices: no answer within 300 ms' })
  t.same(await quick.getInvoices({ clientId: 3 }), { total: 0, invoices: [] }, 'the next call is served')
})

t.test('the caller gives up: timeout', async t => {
  billing.injectFault({ kind: 'blackhole', times: 1 })
  const error = await failure(whmcs.getInvoices({ clientId: 1 }, AbortSignal.timeout(100)))
  t.match(error, { failure: 'timeout', message: 'GetInvoices: abandoned by the caller' }, 'the caller\'s signal ended it, not the client\'s deadline')
})

t.test('connection refused: connection_refused', async t => {
  await billing.down()
  t.teardown(() => billing.up())
  t.match(await failure(whmcs.getInvoices({ clientId: 1 })), { failure: 'connection_refused', upstream: 'billing' })
  t.match(recorded.calls.at(-1), { operation: 'GetInvoices', outcome: 'connection_refused' })
  await billing.up()
  t.equal((await whmcs.getInvoices({ clientId: 1 })).total, billing.invoices.filter(invoice => invoice.userid === 1).length, 'back when the upstream is')
})

t.test('an observer that throws does not fail the call', async t => {
  const local = recorder()
  const observed = client({ log: local.log, onCall: () => { throw new Error('metrics bug') } })
  t.same(await observed.validateLogin('jane@example.com', 'correct-horse'), { userId: 1, twoFactorRequired: false })
  t.match(local.lines, [{ level: 'error' }])
})

t.test('a closed client: upstream_error', async t => {
  const closed = client()
  await closed.close()
  t.match(await failure(closed.health(AbortSignal.timeout(1000))), { failure: 'upstream_error' })
})

t.test('no credential or password in any log line or error message', async t => {
  t.ok(recorded.lines.length > 5 && errors.length > 5, 'there was plenty to read')
  const secrets = [billing.secret, 'not-the-secret', 'correct-horse', 'wrong-password', 'secret-page-content']
  t.same(leaks(readable(recorded.lines, errors), secrets), [])
})

t.test('GetOrders: the status of an order, or null for an unknown one', async t => {
  const placed = await whmcs.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
  t.equal(await whmcs.getOrderStatus(placed.orderId), 'Pending')
  await whmcs.acceptOrder(placed.orderId)
  t.equal(await whmcs.getOrderStatus(placed.orderId), 'Active', 'accepted')
  t.equal(await whmcs.getOrderStatus(999_999), null)
})

t.test('an answer that echoes the API credentials: the failure and its log line carry them redacted, the excerpt bounded', async t => {
  const identifier = 'an-identifier-of-the-test'
  const secret = 'a-secret-of-the-test-0123456789'
  const url = await stubServer(t, () => json(200, { result: 'error', message: `Request with identifier ${identifier} and secret ${secret} rejected: ${'x'.repeat(500)}` }))
  const whmcs = client({ url: `${url}/includes/api.php`, identifier, secret })
  const before = recorded.lines.length
  const refused = await failure(whmcs.getInvoices({ clientId: 1, limitStart: 0, limitNum: 10 }))
  const logged = JSON.stringify(recorded.lines.slice(before))
  for (const [name, text] of [['the failure', refused.message], ['the log', logged]] as const) {
    t.notMatch(text, secret, `${name}: no secret`)
    t.notMatch(text, identifier, `${name}: no identifier`)
    t.match(text, '[redacted]', `${name}: said to be hidden`)
  }
  t.ok(refused.message.length < 260, `the excerpt is bounded (${refused.message.length} characters)`)
  t.match(recorded.lines.slice(before), [{ level: 'error', details: { upstream: 'billing', operation: 'GetInvoices', failure: 'upstream_error' } }], 'logged once, with its class')
})

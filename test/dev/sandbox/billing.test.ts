import t from 'tap'
import { BillingSimulator } from '../../../dev/sandbox/billing.js'

// The answers are probed field by field; t.match and t.same check their shapes.
type Json = any

const billing = await new BillingSimulator().start()
t.teardown(() => billing.close())

async function callApi (params: Record<string, string>, credentials = { identifier: billing.identifier, secret: billing.secret }): Promise<{ status: number, body: Json }> {
  const response = await fetch(billing.apiUrl, {
    method: 'POST',
    body: new URLSearchParams({ ...credentials, responsetype: 'json', ...params })
  })
  return { status: response.status, body: await response.json() }
}

t.test('wrong or missing credentials: HTTP 403 Authentication Failed', async t => {
  for (const credentials of [{ identifier: billing.identifier, secret: 'wrong' }, { identifier: '', secret: '' }]) {
    const { status, body } = await callApi({ action: 'GetInvoices' }, credentials)
    t.equal(status, 403)
    t.same(body, { result: 'error', message: 'Authentication Failed' })
  }
})

t.test('unknown action: Command Not Found', async t => {
  const { status, body } = await callApi({ action: 'NoSuchThing' })
  t.equal(status, 200)
  t.same(body, { result: 'error', message: 'Command Not Found' })
})

t.test('without responsetype=json WHMCS answers XML', async t => {
  const response = await fetch(billing.apiUrl, {
    method: 'POST',
    body: new URLSearchParams({ identifier: billing.identifier, secret: billing.secret, action: 'WhmcsDetails' })
  })
  t.match(response.headers.get('content-type'), /xml/)
  t.match(await response.text(), /<whmcsapi><action>whmcsdetails<\/action><result>success<\/result>/)
})

t.test('ValidateLogin', async t => {
  const good = await callApi({ action: 'ValidateLogin', email: 'jane@example.com', password2: 'correct-horse' })
  t.equal(good.body.result, 'success')
  t.equal(good.body.userid, 1)
  t.type(good.body.passwordhash, 'string')
  t.equal(good.body.twoFactorEnabled, false)
  const bad = await callApi({ action: 'ValidateLogin', email: 'jane@example.com', password2: 'wrong' })
  t.same(bad.body, { result: 'error', message: 'Email or Password Invalid' })
  const guarded = await callApi({ action: 'ValidateLogin', email: 'tom@example.com', password2: 'second-factor' })
  t.same(guarded.body, { result: 'success', userid: 5, twoFactorEnabled: true }, 'with two-factor authentication on: no session hash')
  const newcomer = await callApi({ action: 'ValidateLogin', email: 'nina@example.com', password2: 'fresh-start' })
  t.equal(newcomer.body.userid, 4, 'a WHMCS 8 user id, not the client id (3)')
})

t.test('GetClientsDetails', async t => {
  const { body } = await callApi({ action: 'GetClientsDetails', clientid: '2' })
  t.equal(body.result, 'success')
  t.equal(body.userid, 2)
  t.match(body.client, { id: 2, firstname: 'John', lastname: 'Smith', email: 'john@example.com', credit: '0.00' })
  t.notOk('password' in body.client)
  const byEmail = await callApi({ action: 'GetClientsDetails', email: 'NINA@example.com' })
  t.match(byEmail.body.client, { id: 3, owner_user_id: 4 }, 'found by email, whatever its case; the owner is user 4')
  const missing = await callApi({ action: 'GetClientsDetails', clientid: '999' })
  t.same(missing.body, { result: 'error', message: 'Client Not Found' })
})

t.test('GetInvoices: string money, WHMCS dates, paging and filters', async t => {
  const { body } = await callApi({ action: 'GetInvoices', userid: '1', limitnum: '2', orderby: 'date', order: 'desc' })
  t.match(body, { result: 'success', totalresults: 5, startnumber: 0, numreturned: 2 })
  t.same(body.invoices.invoice.map((invoice: Json) => invoice.id), [1005, 1004])
  const [future, taxed] = body.invoices.invoice
  t.equal(future.status, 'Unpaid')
  t.equal(future.datepaid, '0000-00-00 00:00:00')
  t.equal(future.total, '10.00')
  t.match(taxed, { subtotal: '10.00', tax: '2.00', total: '12.00', taxrate: '20.00', currencycode: 'GBP' })

  const paid = await callApi({ action: 'GetInvoices', userid: '1', status: 'Paid' })
  t.same(paid.body.invoices.invoice.map((invoice: Json) => [invoice.id, invoice.total, invoice.datepaid]), [
    [1001, '10.00', '2025-01-10 09:12:44'],
    [1002, '14.99', '2025-02-03 17:40:02']
  ])
  const overdue = await callApi({ action: 'GetInvoices', userid: '1', status: 'Overdue' })
  t.same(overdue.body.invoices.invoice.map((invoice: Json) => invoice.id), [1004])

  const none = await callApi({ action: 'GetInvoices', userid: '3' })
  t.same(none.body, { result: 'success', totalresults: 0, startnumber: 0, numreturned: 0, invoices: [] })
})

t.test('GetInvoice: flat fields with string ids, items and transactions', async t => {
  const { body } = await callApi({ action: 'GetInvoice', invoiceid: '1002' })
  t.match(body, { result: 'success', invoiceid: '1002', userid: '1', status: 'Paid', total: '14.99', balance: '0.00' })
  t.same(body.items.item.map((item: Json) => item.amount), ['10.00', '4.99'])
  t.equal(body.transactions.transaction[0].amountin, '14.99')
  const unpaid = await callApi({ action: 'GetInvoice', invoiceid: '1005' })
  t.equal(unpaid.body.transactions, '')
  t.equal(unpaid.body.datepaid, '0000-00-00 00:00:00')
  const missing = await callApi({ action: 'GetInvoice', invoiceid: '4242' })
  t.same(missing.body, { status: 'error', message: 'Invoice ID Not Found' }, 'without a result, as WHMCS answers it')
})

t.test('AddOrder then AcceptOrder, twice', async t => {
  const added = await callApi({ action: 'AddOrder', clientid: '1', 'pid[0]': '2', 'billingcycle[0]': 'monthly', paymentmethod: 'paypal' })
  t.match(added.body, { result: 'success', orderid: Number, serviceids: /^\d+$/, addonids: '', domainids: '', invoiceid: Number })
  t.equal(billing.orders.find(order => order.id === added.body.orderid)?.status, 'Pending')
  const invoice = await callApi({ action: 'GetInvoice', invoiceid: String(added.body.invoiceid) })
  t.match(invoice.body, { status: 'Unpaid', total: '25.00' })

  const accepted = await callApi({ action: 'AcceptOrder', orderid: String(added.body.orderid) })
  t.same(accepted.body, { result: 'success' })
  t.equal(billing.orders.find(order => order.id === added.body.orderid)?.status, 'Active')
  const again = await callApi({ action: 'AcceptOrder', orderid: String(added.body.orderid) })
  t.same(again.body, { result: 'error', message: 'Order ID not found or Status not Pending' })
  const unknown = await callApi({ action: 'AcceptOrder', orderid: '777' })
  t.same(unknown.body, { result: 'error', message: 'Order ID not found or Status not Pending' })
})

t.test('AddOrder refusals', async t => {
  const noClient = await callApi({ action: 'AddOrder', clientid: '99', pid: '1', paymentmethod: 'paypal' })
  t.same(noClient.body, { result: 'error', message: 'Client ID Not Found' })
  const badMethod = await callApi({ action: 'AddOrder', clientid: '1', pid: '1', paymentmethod: 'gold-bars' })
  t.match(badMethod.body.message, /^Invalid Payment Method\. Valid options include /)
  const noProduct = await callApi({ action: 'AddOrder', clientid: '1', pid: '404', paymentmethod: 'paypal' })
  t.same(noProduct.body, { result: 'error', message: 'No items added to cart so order cannot proceed' })
})

t.test('WhmcsDetails', async t => {
  const { body } = await callApi({ action: 'WhmcsDetails' })
  t.same(body, { result: 'success', whmcs: { version: '8.13.1', canonicalversion: '8.13.1-release.1' } })
})

t.test('calls are recorded without secrets', async t => {
  billing.resetCalls()
  await callApi({ action: 'ValidateLogin', email: 'jane@example.com', password2: 'correct-horse' })
  const [call] = billing.calls
  t.match(call, { method: 'POST', path: '/includes/api.php', route: 'ValidateLogin', params: { email: 'jane@example.com' } })
  t.notMatch(JSON.stringify(call), /correct-horse|sandbox-billing-secret/)
})

t.test('only the most recent calls are kept, so a long-running sandbox stays within bounds', async t => {
  const kept = await new BillingSimulator({ maxRecordedCalls: 3 }).start()
  t.teardown(() => kept.close())
  for (const invoiceid of ['1', '2', '3', '4', '5']) {
    const response = await fetch(kept.apiUrl, {
      method: 'POST',
      body: new URLSearchParams({ identifier: kept.identifier, secret: kept.secret, responsetype: 'json', action: 'GetInvoice', invoiceid })
    })
    await response.arrayBuffer()
  }
  t.same(kept.calls.map(call => call.params?.invoiceid), ['3', '4', '5'], 'the oldest give way first')
})

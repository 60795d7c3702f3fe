import t from 'tap'
import { buildTestApp, startTestSandbox } from '../../helpers/app.js'
import { before } from '../../helpers/before.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'

t.test('the caller\'s invoices, normalised and paged', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const token = await login(app)
  const janes = sandbox.billing.invoices.filter((invoice) => invoice.userid === 1)

  const first = await app.inject({ url: '/api/invoices?page=1&limit=2', headers: bearer(token) })
  t.equal(first.statusCode, 200)
  const page = first.json()
  t.match(page, { page: 1, limit: 2, total: janes.length })
  t.equal(page.invoices.length, 2)
  const second = (await app.inject({ url: '/api/invoices?page=2&limit=2', headers: bearer(token) })).json()
  t.not(second.invoices[0].id, page.invoices[0].id, 'page 2 holds other invoices')

  for (const invoice of page.invoices) {
    t.type(invoice.total, 'number', 'money is a number')
    t.type(invoice.subtotal, 'number')
    t.notOk('clientId' in invoice, 'no field beyond the schema')
  }
  const all = (await app.inject({ url: '/api/invoices?limit=100', headers: bearer(token) })).json()
  const unpaid = all.invoices.find((invoice: { status: string }) => invoice.status === 'Unpaid')
  t.equal(unpaid.datePaid, null, '0000-00-00 00:00:00 becomes null')
  const onlyPaid = (await app.inject({ url: '/api/invoices?status=Paid&limit=100', headers: bearer(token) })).json()
  t.ok(onlyPaid.invoices.length > 0 && onlyPaid.invoices.every((invoice: { status: string }) => invoice.status === 'Paid'), 'status filter')

  const detail = await app.inject({ url: `/api/invoices/${unpaid.id}`, headers: bearer(token) })
  t.equal(detail.statusCode, 200)
  t.match(detail.json(), { id: unpaid.id, datePaid: null, total: Number, balance: Number, items: Array })
  t.equal(unpaid.currencyCode, 'GBP', 'the list names the currency (GetInvoices does)')
  t.equal(detail.json().currencyCode, unpaid.currencyCode, 'and one invoice names the same, from its client (GetInvoice names none)')
})

t.test('another client\'s invoice is 404', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const johns = sandbox.billing.invoices.find((invoice) => invoice.userid === 2)!
  const janesToken = await login(app)
  const response = await app.inject({ url: `/api/invoices/${johns.id}`, headers: bearer(janesToken) })
  t.equal(response.statusCode, 404)
  t.match(response.json(), { code: 'INVOICE_NOT_FOUND', message: 'Invoice not found' })
  const missing = await app.inject({ url: '/api/invoices/999999', headers: bearer(janesToken) })
  t.same({ ...missing.json(), correlationId: '' }, { ...response.json(), correlationId: '' }, 'the same answer as an invoice that does not exist')
})

// Far above the request deadlines these tests set.
const UPSTREAM_TIMEOUT_MS = 10_000

t.test('billing black-holed: 503 in bounded time, and failedRequests moves', async (t) => {
  const sandbox = await startTestSandbox(t)
  // The request's deadline (600 ms) ends it, long before the call's own timeout would.
  const app = await buildTestApp(t, { BILLING_QUEUE_TIMEOUT_MS: '600', UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS) }, sandbox)
  const token = await login(app)
  sandbox.billing.injectFault({ kind: 'blackhole' })
  const failedBefore = (await app.inject('/health/queues')).json().billing.metrics.failedRequests
  const response = await before(UPSTREAM_TIMEOUT_MS, app.inject({ url: '/api/invoices/1001', headers: bearer(token) }))
  if (response === undefined) throw new Error(`no answer within UPSTREAM_TIMEOUT_MS (${UPSTREAM_TIMEOUT_MS} ms): the request's deadline did not end it`)
  t.equal(response.statusCode, 503, 'answered at the request\'s deadline, before the call\'s own timeout')
  t.match(response.json(), { code: 'BILLING_UNAVAILABLE', message: 'Billing service is temporarily unavailable' })
  t.equal((await app.inject('/health/queues')).json().billing.metrics.failedRequests, failedBefore + 1)

  sandbox.billing.clearFaults()
  sandbox.billing.injectFault({ kind: 'http5xx', status: 502 })
  const failing = await app.inject({ url: '/api/invoices?page=3', headers: bearer(token) })
  t.equal(failing.statusCode, 503, 'an HTTP 5xx upstream is the same 503')
  // The correlation id is a random UUID, whose hex may hold "502": the answer without it.
  const { correlationId: _, ...answer } = failing.json<Record<string, unknown>>()
  t.notMatch(JSON.stringify(answer), /502|Bad Gateway|api\.php/)
})

// Anything of the upstream or the process that must never reach an answer.
const LEAKS = /127\.0\.0\.1|localhost|ECONN|api\.php|unexpected error occurred|Error:|\bat .+\.[jt]s/

t.test('billing down or answering result=error: 503 BILLING_UNAVAILABLE, nothing of the upstream in the body', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const token = await login(app)
  const faults = [
    { name: 'connection refused', break: () => sandbox.billing.down(), mend: () => sandbox.billing.up() },
    { name: 'result=error', break: () => sandbox.billing.injectFault({ kind: 'error' }), mend: () => sandbox.billing.clearFaults() }
  ]
  // A new page each time, so that no answer comes from the services cache.
  let page = 1
  for (const fault of faults) {
    await fault.break()
    for (const url of [`/api/invoices?page=${page}`, `/api/invoices/${1000 + page}`]) {
      const correlationId = `billing-${page}`
      const response = await app.inject({ url, headers: { ...bearer(token), 'x-correlation-id': correlationId } })
      t.equal(response.statusCode, 503, `${fault.name}: ${url} is 503`)
      t.same(response.json(), {
        statusCode: 503,
        error: 'Service Unavailable',
        message: 'Billing service is temporarily unavailable',
        code: 'BILLING_UNAVAILABLE',
        correlationId
      }, `${fault.name}: the error shape, nothing more`)
      t.notMatch(response.body, LEAKS, `${fault.name}: no host, driver text or stack`)
      page++
    }
    await fault.mend()
  }
  t.equal((await app.inject({ url: `/api/invoices?page=${page}`, headers: bearer(token) })).statusCode, 200, 'mended: 200 again')
})

t.test('a full billing queue answers 503 at once, not at the deadline', async (t) => {
  const sandbox = await startTestSandbox(t)
  const deadlineMs = 3000
  const app = await buildTestApp(t, { BILLING_QUEUE_CONCURRENCY: '1', BILLING_QUEUE_MAX_SIZE: '2', BILLING_QUEUE_TIMEOUT_MS: String(deadlineMs) }, sandbox)
  const token = await login(app)
  sandbox.billing.injectFault({ kind: 'blackhole' })
  const invoices = (page: number) => app.inject({ url: `/api/invoices?page=${page}`, headers: bearer(token) })

  // One in flight and two waiting fill the queue; the black hole holds them there.
  const held = [1, 2, 3].map(invoices)
  await waitFor('one in flight, two waiting', async () => {
    const { metrics } = (await app.inject('/health/queues')).json().billing
    return metrics.pendingRequests === 1 && metrics.queueSize === 2
  })
  // The held ones end at the deadline: the refusal comes before any of them.
  const first = await Promise.race([invoices(4).then((answer) => ({ refused: answer })), Promise.race(held).then(() => undefined)])
  if (first === undefined) throw new Error(`a held request was answered (at the ${deadlineMs} ms deadline) before the one the full queue refuses`)
  t.equal(first.refused.statusCode, 503, 'refused before the held requests reached their deadline')
  t.match(first.refused.json(), { code: 'BILLING_UNAVAILABLE', message: 'Billing service is temporarily unavailable' })

  const heldAnswers = await Promise.all(held)
  t.same(heldAnswers.map((answer) => answer.statusCode), [503, 503, 503], 'the held requests get their 503 at the deadline')
})

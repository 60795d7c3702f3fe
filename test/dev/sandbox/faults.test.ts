import t from 'tap'
import { BillingSimulator } from '../../../dev/sandbox/billing.js'
import { TelecomSimulator } from '../../../dev/sandbox/telecom.js'
import { waitFor } from '../../helpers/processes.js'
import { before } from '../../helpers/before.js'

const billing = await new BillingSimulator().start()
const telecom = await new TelecomSimulator().start()
t.teardown(() => Promise.all([billing.close(), telecom.close()]))

function whmcs (action: string, signal?: AbortSignal): Promise<Response> {
  return fetch(billing.apiUrl, {
    method: 'POST',
    body: new URLSearchParams({ identifier: billing.identifier, secret: billing.secret, responsetype: 'json', action }),
    ...(signal === undefined ? {} : { signal })
  })
}

function activate (key: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${telecom.url}/v1/activations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${telecom.apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ orderId: key, productId: '1' }),
    ...(signal === undefined ? {} : { signal })
  })
}

t.afterEach(() => {
  billing.clearFaults()
  telecom.clearFaults()
})

t.test('latency delays the answer', async t => {
  billing.injectFault({ kind: 'latency', ms: 200 })
  const started = Date.now()
  const response = await whmcs('WhmcsDetails')
  t.ok(Date.now() - started >= 190)
  t.equal(response.status, 200)
})

t.test('http5xx, scoped to one action and to the next N calls', async t => {
  billing.injectFault({ kind: 'http5xx', status: 503, body: 'upstream maintenance', route: 'GetInvoices', times: 2 })
  t.equal((await whmcs('WhmcsDetails')).status, 200, 'other actions are untouched')
  for (let call = 0; call < 2; call++) {
    const response = await whmcs('GetInvoices')
    t.equal(response.status, 503)
    t.equal(await response.text(), 'upstream maintenance')
  }
  t.equal((await whmcs('GetInvoices')).status, 200, 'the fault is used up')
  t.same(billing.faults, [])
})

t.test('error: the protocol error answer', async t => {
  billing.injectFault({ kind: 'error', message: 'Database connection failed', times: 1 })
  const response = await whmcs('WhmcsDetails')
  t.equal(response.status, 200)
  t.same(await response.json(), { result: 'error', message: 'Database connection failed' })
  telecom.injectFault({ kind: 'error', status: 429, code: 'rate_limit_error', message: 'slow down', times: 1 })
  const limited = await activate('801E')
  t.equal(limited.status, 429)
  t.same(await limited.json(), { error: { type: 'rate_limit_error', message: 'slow down' } })
})

t.test('blackhole: the request is accepted and never answered', async t => {
  billing.injectFault({ kind: 'blackhole', times: 1 })
  await t.rejects(whmcs('WhmcsDetails', AbortSignal.timeout(300)), { name: 'TimeoutError' })
  t.equal(billing.calls.at(-1)?.route, 'WhmcsDetails', 'the call was received')
  t.equal((await whmcs('WhmcsDetails')).status, 200)
})

t.test('a client that gives up on a blackholed call ends its handling; an answered call leaves none', async t => {
  billing.injectFault({ kind: 'blackhole', times: 1 })
  await t.rejects(whmcs('WhmcsDetails', AbortSignal.timeout(300)), { name: 'TimeoutError' })
  await waitFor('the abandoned call to end', async () => billing.callsInProgress === 0, 2000)
  t.equal((await whmcs('WhmcsDetails')).status, 200)
  t.equal(billing.callsInProgress, 0)
})

t.test('a fault after handling: the activation happens, the answer is lost, a retry replays it', async t => {
  telecom.injectFault({ kind: 'blackhole', route: 'activations', after: true, times: 1 })
  await t.rejects(activate('801F', AbortSignal.timeout(300)), { name: 'TimeoutError' })
  t.equal(telecom.activations.filter(activation => activation.orderId === '801F').length, 1)
  const retry = await activate('801F')
  t.equal(retry.status, 201)
  t.equal(retry.headers.get('idempotent-replayed'), 'true')
})

t.test('down refuses connections, up serves again on the same port with the same data', async t => {
  const port = telecom.port
  await telecom.down()
  t.notOk(telecom.isUp)
  // Let fetch notice that its pooled keep-alive sockets were closed, so that it dials again.
  await new Promise(resolve => setTimeout(resolve, 50))
  await t.rejects(activate('801G'), { cause: { code: 'ECONNREFUSED' } })
  await telecom.up()
  t.equal(telecom.port, port)
  t.equal((await activate('801F')).headers.get('idempotent-replayed'), 'true')
})

t.test('close ends a blackholed request promptly', async t => {
  const simulator = await new TelecomSimulator().start()
  simulator.injectFault({ kind: 'blackhole' })
  const pending = fetch(`${simulator.url}/v1/status`)
  await new Promise(resolve => setTimeout(resolve, 50))
  // The black hole never answers: only the close ends the pending call.
  t.ok(await before(30_000, simulator.close().then(() => true)), 'closed without waiting on the black-holed call')
  await t.rejects(pending)
})

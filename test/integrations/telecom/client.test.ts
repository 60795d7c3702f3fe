import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { TelecomApiError, TelecomClient, type TelecomClientOptions } from '../../../integrations/telecom/client.js'
import { TelecomSimulator, startSandbox } from '../../../dev/sandbox/index.js'
import { json, stubServer } from '../../helpers/http-stub.js'
import { leaks, readable, upstreamClients } from '../../helpers/integrations.js'

const sandbox = await startSandbox()
const { telecom } = sandbox
const { recorded, errors, client, failure, closeClients } = upstreamClients((options: Partial<TelecomClientOptions>, { log, onCall }) => new TelecomClient({
  url: sandbox.settings.TELECOM_API_URL ?? '',
  apiKey: sandbox.settings.TELECOM_API_KEY ?? '',
  log,
  onCall,
  ...options
}))
t.teardown(async () => {
  await closeClients()
  await sandbox.close()
})

const provider = client()

t.afterEach(() => telecom.clearFaults())

t.test('activate: the activation, with the idempotency key sent', async t => {
  const activation = await provider.activate({ orderId: '801A', productId: '2', idempotencyKey: '801A' })
  t.match(activation, { id: /^act_/, status: 'active', msisdn: /^\+44/, replayed: false })
  const call = telecom.calls.at(-1)
  t.equal(call?.headers['idempotency-key'], '801A')
  t.same(JSON.parse(String(call?.params?.body)), { orderId: '801A', productId: '2' })
  t.match(recorded.calls.at(-1), { upstream: 'telecom', operation: 'activate', outcome: 'ok' })
})

t.test('the same key again: the first answer, and no second activation', async t => {
  const first = await provider.activate({ orderId: '801B', productId: '1', idempotencyKey: '801B' })
  const replay = await provider.activate({ orderId: '801B', productId: '1', idempotencyKey: '801B' })
  t.same({ ...replay, replayed: false }, first)
  t.equal(replay.replayed, true)
  t.equal(telecom.activations.filter(activation => activation.orderId === '801B').length, 1)
  t.match(telecom.idempotencyKeys.find(use => use.key === '801B'), { uses: 2 })
})

t.test('the key reused with other parameters: upstream_error, 422', async t => {
  await provider.activate({ orderId: '801C', productId: '1', idempotencyKey: '801C' })
  const error = await failure(provider.activate({ orderId: '801C', productId: '3', idempotencyKey: '801C' }))
  t.type(error, TelecomApiError)
  t.match(error, { failure: 'upstream_error', status: 422, errorType: 'idempotency_error' })
})

t.test('the key still being processed: upstream_error, 409', async t => {
  const slow = await new TelecomSimulator({ activationDelayMs: 300 }).start()
  t.teardown(() => slow.close())
  const slowClient = client({ url: slow.url, apiKey: slow.apiKey })
  const first = slowClient.activate({ orderId: '801D', productId: '1', idempotencyKey: '801D' })
  await sleep(50)
  t.match(await failure(slowClient.activate({ orderId: '801D', productId: '1', idempotencyKey: '801D' })), { failure: 'upstream_error', status: 409 })
  t.match(await first, { status: 'active' })
})

t.test('a wrong API key: auth_failed', async t => {
  const wrong = client({ apiKey: 'not-the-telecom-key' })
  t.match(await failure(wrong.activate({ orderId: '801E', productId: '1', idempotencyKey: '801E' })), { failure: 'auth_failed', status: 401 })
  t.match(await failure(wrong.health(AbortSignal.timeout(1000))), { failure: 'auth_failed' })
})

t.test('rate limited: quota_exceeded', async t => {
  telecom.injectFault({ kind: 'error', route: 'activations', status: 429, code: 'rate_limit_error', message: 'slow down', times: 1 })
  t.match(await failure(provider.activate({ orderId: '801F', productId: '1', idempotencyKey: '801F' })), { failure: 'quota_exceeded', errorType: 'rate_limit_error' })
})

t.test('health: /v1/status', async t => {
  await provider.health(AbortSignal.timeout(1000))
  t.match(recorded.calls.at(-1), { operation: 'status', outcome: 'ok' })
})

t.test('health: any 2xx is healthy, whatever its body', async t => {
  for (const [status, body] of [[204, ''], [200, 'OK']] as const) {
    const probe = client({ url: await stubServer(t, () => ({ status, body })) })
    await probe.health(AbortSignal.timeout(1000))
    t.match(recorded.calls.at(-1), { operation: 'status', outcome: 'ok' }, `${status} ${JSON.stringify(body)}`)
    await probe.close()
  }
})

t.test('activate: numeric ids and numbers are taken as text, a number not yet assigned as null; no id is no activation', async t => {
  let answer: unknown = {}
  const elsewhere = client({ url: await stubServer(t, () => json(201, answer)) })
  const request = { orderId: '801A', productId: '1', idempotencyKey: '801A' }
  answer = { id: 123, status: 'active', msisdn: 447700900123 }
  t.same(await elsewhere.activate(request), { id: '123', status: 'active', msisdn: '447700900123', replayed: false })
  answer = { id: 'act-2', status: 'pending', msisdn: null }
  t.same(await elsewhere.activate(request), { id: 'act-2', status: 'pending', msisdn: null, replayed: false })
  answer = { status: 'active', msisdn: '447700900123' }
  t.match(await failure(elsewhere.activate(request)), { failure: 'upstream_error', message: 'activate: HTTP 201 answer without an activation' })
})

t.test('HTTP 5xx: http_5xx', async t => {
  telecom.injectFault({ kind: 'http5xx', status: 502, times: 1 })
  t.match(await failure(provider.activate({ orderId: '801G', productId: '1', idempotencyKey: '801G' })), { failure: 'http_5xx', message: 'activate: HTTP 502' })
})

t.test('a black hole: timeout within timeoutMs', async t => {
  const quick = client({ timeoutMs: 300 })
  telecom.injectFault({ kind: 'blackhole', route: 'activations', after: true, times: 1 })
  // The black hole never answers: only the client's own 300 ms deadline ends the call.
  t.match(await failure(quick.activate({ orderId: '801H', productId: '1', idempotencyKey: '801H' })), { failure: 'timeout', message: /300 ms/ })
  const retry = await quick.activate({ orderId: '801H', productId: '1', idempotencyKey: '801H' })
  t.equal(retry.replayed, true, 'the retry gets the answer that was lost')
  t.equal(telecom.activations.filter(activation => activation.orderId === '801H').length, 1)
})

t.test('connection refused: connection_refused', async t => {
  await telecom.down()
  t.teardown(() => telecom.up())
  t.match(await failure(provider.health(AbortSignal.timeout(1000))), { failure: 'connection_refused', upstream: 'telecom' })
  t.match(recorded.calls.at(-1), { operation: 'status', outcome: 'connection_refused' })
})

t.test('the API key is in no log line or error message', async t => {
  t.ok(recorded.lines.length > 5 && errors.length > 5, 'there was plenty to read')
  t.same(leaks(readable(recorded.lines, errors), [telecom.apiKey, 'not-the-telecom-key']), [])
})

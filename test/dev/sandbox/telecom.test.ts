import t from 'tap'
import { TelecomSimulator } from '../../../dev/sandbox/telecom.js'

const telecom = await new TelecomSimulator({ activationDelayMs: 100 }).start()
t.teardown(() => telecom.close())

async function activate (body: unknown, headers: Record<string, string> = {}): Promise<{ status: number, replayed: string | null, body: Record<string, unknown> }> {
  const response = await fetch(`${telecom.url}/v1/activations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${telecom.apiKey}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body)
  })
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), body: await response.json() as Record<string, unknown> }
}

t.test('status needs the API key', async t => {
  const ok = await fetch(`${telecom.url}/v1/status`, { headers: { authorization: `Bearer ${telecom.apiKey}` } })
  t.equal(ok.status, 200)
  t.same(await ok.json(), { status: 'ok' })
  const refused = await fetch(`${telecom.url}/v1/status`, { headers: { authorization: 'Bearer wrong' } })
  t.equal(refused.status, 401)
  t.match(await refused.json(), { error: { type: 'authentication_error' } })
})

t.test('an activation needs the API key and an Idempotency-Key', async t => {
  const noKey = await activate({ orderId: '801A', productId: '2' }, { authorization: 'Bearer nope' })
  t.equal(noKey.status, 401)
  const noIdempotencyKey = await activate({ orderId: '801A', productId: '2' })
  t.equal(noIdempotencyKey.status, 400)
  t.match(noIdempotencyKey.body, { error: { type: 'invalid_request_error', message: /Idempotency-Key/ } })
  t.equal(telecom.activations.length, 0)
})

t.test('the same key returns the first answer and creates one activation', async t => {
  const first = await activate({ orderId: '801B', productId: '2' }, { 'idempotency-key': '801B' })
  t.equal(first.status, 201)
  t.match(first.body, { id: /^act_/, status: 'active', msisdn: /^\+447700900\d{3}$/ })
  t.equal(first.replayed, null)
  const again = await activate({ productId: '2', orderId: '801B' }, { 'idempotency-key': '801B' })
  t.equal(again.status, 201)
  t.equal(again.replayed, 'true')
  t.same(again.body, first.body)
  t.equal(telecom.activations.length, 1)
  t.same(telecom.idempotencyKeys, [{ key: '801B', uses: 2 }])
})

t.test('the same key with other parameters: 422', async t => {
  const reused = await activate({ orderId: '801B', productId: '3' }, { 'idempotency-key': '801B' })
  t.equal(reused.status, 422)
  t.match(reused.body, { error: { type: 'idempotency_error' } })
  t.equal(telecom.activations.length, 1)
})

t.test('the same key while the first request still runs: 409', async t => {
  const [first, concurrent] = await Promise.all([
    activate({ orderId: '801C', productId: '2' }, { 'idempotency-key': '801C' }),
    new Promise(resolve => setTimeout(resolve, 20)).then(() => activate({ orderId: '801C', productId: '2' }, { 'idempotency-key': '801C' }))
  ])
  t.equal(first.status, 201)
  t.equal(concurrent.status, 409)
  t.equal(telecom.activations.filter(activation => activation.orderId === '801C').length, 1)
})

t.test('a request refused before it ran leaves the key free', async t => {
  const invalid = await activate({ orderId: '801D' }, { 'idempotency-key': '801D' })
  t.equal(invalid.status, 400)
  const valid = await activate({ orderId: '801D', productId: '1' }, { 'idempotency-key': '801D' })
  t.equal(valid.status, 201)
})

import t from 'tap'
import { buildTestApp } from '../../helpers/app.js'
import { ORDER, placementTestApp, untilNotInUse } from '../../helpers/placement.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'

function withKey (token: string, key: string, payload: Record<string, unknown> = ORDER.payload) {
  return { ...ORDER, payload, headers: { ...bearer(token), 'idempotency-key': key } }
}

t.test('the same Idempotency-Key twice, on two instances: the same answer, one billing order', async (t) => {
  const { sandbox, databaseUrl, app, token } = await placementTestApp(t)
  const other = await buildTestApp(t, { DATABASE_URL: databaseUrl }, sandbox)
  const first = await app.inject(withKey(token, '"8e03978e-40d5-43e8-bc93-6894a57f9324"'))
  t.equal(first.statusCode, 201)
  const again = await other.inject(withKey(token, '"8e03978e-40d5-43e8-bc93-6894a57f9324"'))
  t.equal(again.statusCode, 201)
  t.equal(again.body, first.body, 'the same body, byte for byte')
  const bare = await app.inject(withKey(token, '8e03978e-40d5-43e8-bc93-6894a57f9324'))
  t.equal(bare.body, first.body, 'the key bare or quoted is one key')
  t.equal(sandbox.billing.orders.length, 1, 'one billing order')
  t.equal(sandbox.crm.orders.length, 1, 'one CRM order')

  // Another client's key of the same value is its own.
  const john = await login(app, 'john@example.com', 'battery-staple')
  const johns = await app.inject(withKey(john, '8e03978e-40d5-43e8-bc93-6894a57f9324'))
  t.equal(johns.statusCode, 201)
  t.not(johns.json().id, first.json().id)
  t.equal(sandbox.billing.orders.length, 2)

  // No key: every request places an order, as before.
  await app.inject({ ...ORDER, headers: bearer(token) })
  await app.inject({ ...ORDER, headers: bearer(token) })
  t.equal(sandbox.billing.orders.length, 4)
})

t.test('the same Idempotency-Key concurrently: one billing order; the others 409 while it runs, then the same answer', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t)
  sandbox.billing.injectFault({ kind: 'latency', route: 'AddOrder', ms: 300 })
  const answers = await Promise.all(Array.from({ length: 5 }, () => app.inject(withKey(token, 'concurrent-1'))))
  const placed = answers.filter((answer) => answer.statusCode === 201)
  t.equal(placed.length, 1, `one placed: ${answers.map((answer) => `${answer.statusCode} ${answer.json().code ?? ''}`).join(', ')}`)
  for (const answer of answers.filter((candidate) => candidate.statusCode !== 201)) {
    t.equal(answer.statusCode, 409)
    t.match(answer.json(), { code: 'IDEMPOTENCY_KEY_IN_USE', message: /still being processed/ })
  }
  t.equal(sandbox.billing.orders.length, 1, 'one billing order')
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 1, 'one AddOrder')
  const after = await app.inject(withKey(token, 'concurrent-1'))
  t.equal(after.statusCode, 201)
  t.equal(after.body, placed[0]?.body, 'the same answer once it is done')
})

t.test('a different body under the same key: 422 IDEMPOTENCY_KEY_REUSED, nothing placed; a malformed key: 400', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t)
  t.equal((await app.inject(withKey(token, 'reused-1'))).statusCode, 201)
  const reused = await app.inject(withKey(token, 'reused-1', { productId: 2, billingCycle: 'monthly' }))
  t.equal(reused.statusCode, 422)
  t.match(reused.json(), { code: 'IDEMPOTENCY_KEY_REUSED', message: 'This Idempotency-Key was used with a different request body' })
  t.equal((await app.inject(withKey(token, 'reused-1', { productId: '1', billingCycle: 'monthly' }))).statusCode, 201, 'the product id as a string is the same body')
  t.equal(sandbox.billing.orders.length, 1)
  for (const key of ['', 'a'.repeat(256), 'two words', '"unterminated']) {
    const response = await app.inject(withKey(token, key))
    t.equal(response.statusCode, 400, `${JSON.stringify(key.slice(0, 20))}: 400`)
  }
  t.equal(sandbox.billing.orders.length, 1)
})

t.test('a refusal is the key\'s answer; after a 5xx that left no billing order, the same key places the order once', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t)
  sandbox.billing.injectFault({ kind: 'error', route: 'AddOrder', message: 'Unable to add order when client status is Closed', times: 1 })
  const refused = await app.inject(withKey(token, 'refused-1'))
  t.equal(refused.statusCode, 422)
  const replayed = await app.inject(withKey(token, 'refused-1'))
  t.equal(replayed.statusCode, 422)
  t.equal(replayed.body, refused.body, 'the refusal again, its correlation id included')

  // Billing not reached: nothing of the placement stands, so the key places it on the retry.
  sandbox.billing.injectFault({ kind: 'http5xx', route: 'AddOrder', status: 503, times: 1 })
  const unavailable = await app.inject(withKey(token, 'retried-1'))
  t.equal(unavailable.statusCode, 503)
  t.equal(sandbox.billing.orders.length, 0)
  const retried = await app.inject(withKey(token, 'retried-1'))
  t.equal(retried.statusCode, 201, `the retry with its key places it: ${retried.body}`)
  const again = await app.inject(withKey(token, 'retried-1'))
  t.equal(again.body, retried.body, 'and then answers that order')
  t.same(sandbox.billing.orders.map((order) => order.status), ['Pending'], 'invoiced once')
})

t.test('a retry after the CRM create got no answer: the CRM order it made late is linked, never a second one', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t)
  // The caller gives up at its deadline; the CRM makes the order all the same.
  sandbox.crm.injectFault({ kind: 'latency', route: 'rest/sobjects/Order', ms: 2000, times: 1 })
  const incomplete = await app.inject(withKey(token, 'late-1'))
  t.match(incomplete.json(), { statusCode: 503, code: 'ORDER_INCOMPLETE' })
  await waitFor('the late create to land', async () => sandbox.crm.orders.length === 1, 10_000)
  const completed = await app.inject(withKey(token, 'late-1'))
  t.equal(completed.statusCode, 201)
  t.match(completed.json(), { status: 'Pending Review', crmOrderId: sandbox.crm.orders[0]?.Id })
  t.equal(sandbox.billing.orders.length, 1)
  t.equal(sandbox.crm.orders.length, 1, 'one CRM order')
})

t.test('a retry while a CRM create that got no answer may still land: 409 with retry-after; then the retry creates it, once', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t)
  sandbox.crm.injectFault({ kind: 'blackhole', route: 'rest/sobjects/Order', times: 1 })
  const incomplete = await app.inject(withKey(token, 'unanswered-1'))
  t.match(incomplete.json(), { statusCode: 503, code: 'ORDER_INCOMPLETE' })
  const busy = await app.inject(withKey(token, 'unanswered-1'))
  t.equal(busy.statusCode, 409, 'the create sent may still land: none is sent again yet')
  t.match(busy.json(), { code: 'IDEMPOTENCY_KEY_IN_USE' })
  t.ok(Number(busy.headers['retry-after']) >= 1, 'with retry-after')
  t.equal(sandbox.crm.calls.filter((call) => call.route === 'rest/sobjects/Order').length, 1)
  const completed = await untilNotInUse(app, withKey(token, 'unanswered-1'))
  t.equal(completed.statusCode, 201)
  t.match(completed.json(), { status: 'Pending Review', crmOrderId: sandbox.crm.orders[0]?.Id })
  t.equal(sandbox.crm.orders.length, 1, 'one CRM order')
  t.equal(sandbox.billing.calls.filter((call) => call.route === 'AddOrder').length, 1, 'one AddOrder')
})

t.test('an expired key is forgotten: the next request with it places an order', async (t) => {
  const { sandbox, app, token } = await placementTestApp(t, { ORDERS_IDEMPOTENCY_KEY_TTL_S: '1' })
  const first = await app.inject(withKey(token, 'expiring-1'))
  await new Promise((resolve) => setTimeout(resolve, 1500))
  const second = await app.inject(withKey(token, 'expiring-1'))
  t.equal(second.statusCode, 201)
  t.not(second.json().id, first.json().id)
  t.equal(sandbox.billing.orders.length, 2)
})

t.test('the OpenAPI document states the header and the retry contract: which answers to retry with the same key, which need a new one', async (t) => {
  const { app } = await placementTestApp(t)
  const operation = (await app.inject('/docs/json')).json().paths['/api/orders'].post
  t.match(operation.parameters, [{ in: 'header', name: 'idempotency-key', required: false }])
  t.match(operation.responses, {
    409: { description: /IDEMPOTENCY_KEY_IN_USE.*same key after `retry-after`/ },
    422: { description: /IDEMPOTENCY_KEY_REUSED.*ORDER_PLACEMENT_CANCELLED.*send a new one/ },
    503: { description: /ORDER_INCOMPLETE.*Retry with the same Idempotency-Key/ }
  })
  t.match(operation.description, /one key places at most one billing order, ever.*same key after a 5xx, after no answer, and after 409.*After any other 4xx \(400, 422\) send a new key/)
  t.match(operation.parameters, [{ name: 'idempotency-key', description: /each retry of that order/ }])
})

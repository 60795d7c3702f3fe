import { sign } from 'node:crypto'
import t from 'tap'
import { caseSafeId } from '../../../integrations/crm/salesforce-id.js'
import { CrmSimulator } from '../../../dev/sandbox/crm.js'

// The answers are probed field by field; t.match and t.same check their shapes.
type Json = any

const crm = await new CrmSimulator({ apiUsage: { used: 100, max: 5000 } }).start()
t.teardown(() => crm.close())

async function accessToken (): Promise<string> {
  const encode = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  const unsigned = `${encode({ alg: 'RS256' })}.${encode({ iss: crm.clientId, sub: crm.username, aud: crm.loginUrl, exp: Math.floor(Date.now() / 1000) + 180 })}`
  const jwt = `${unsigned}.${sign('RSA-SHA256', Buffer.from(unsigned), crm.privateKey).toString('base64url')}`
  const response = await fetch(`${crm.loginUrl}/services/oauth2/token`, {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion: jwt })
  })
  return ((await response.json()) as { access_token: string }).access_token
}

let token = await accessToken()

async function rest (method: string, resource: string, body?: unknown): Promise<{ status: number, limitInfo: string | null, body: Json }> {
  const response = await fetch(`${crm.instanceUrl}/services/data/v60.0/${resource}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await response.text()
  return { status: response.status, limitInfo: response.headers.get('sforce-limit-info'), body: text === '' ? undefined : JSON.parse(text) }
}

t.test('limits, and Sforce-Limit-Info counting every call', async t => {
  const { status, limitInfo, body } = await rest('GET', 'limits')
  t.equal(status, 200)
  t.equal(limitInfo, 'api-usage=101/5000')
  t.same(body.DailyApiRequests, { Max: 5000, Remaining: 4899 })
  const notFound = await rest('GET', 'sobjects/Order/801000000000000AAA')
  t.equal(notFound.status, 404)
  t.equal(notFound.limitInfo, 'api-usage=102/5000', 'errors carry the header too')
  t.same(notFound.body, [{ errorCode: 'NOT_FOUND', message: 'The requested resource does not exist' }])
})

t.test('Order: create, read, update', async t => {
  const created = await rest('POST', 'sobjects/Order', {
    Status: 'Pending Review', EffectiveDate: '2025-06-01', BillingOrderId__c: '12', BillingClientId__c: '1', Product__c: '2'
  })
  t.equal(created.status, 201)
  t.match(created.body, { id: /^801\w{15}$/, success: true, errors: [] })
  t.equal(created.body.id, caseSafeId(created.body.id.slice(0, 15)), 'an 18-character case-safe id')
  t.match(created.limitInfo, /^api-usage=\d+\/5000$/)

  const read = await rest('GET', `sobjects/Order/${String(created.body.id)}`)
  t.equal(read.status, 200)
  t.match(read.body, {
    attributes: { type: 'Order', url: `/services/data/v60.0/sobjects/Order/${String(created.body.id)}` },
    Id: created.body.id,
    OrderNumber: /^\d{8}$/,
    Status: 'Pending Review',
    BillingOrderId__c: '12',
    Provisioning_Error__c: null
  })

  const updated = await rest('PATCH', `sobjects/Order/${String(created.body.id)}`, { status: 'Activated' })
  t.equal(updated.status, 204, 'field names are case-insensitive')
  t.equal(updated.body, undefined)
  t.ok(updated.limitInfo)
  t.equal(crm.order(created.body.id)?.Status, 'Activated')
  const by15 = await rest('GET', `sobjects/Order/${String(created.body.id).slice(0, 15)}`)
  t.equal(by15.body.Id, created.body.id, 'the 15-character id works too')
})

t.test('the Status of several orders in one SOQL query, as Salesforce answers it; the org changes a Status without an event', async t => {
  const [waiting, approved, rejected] = ['Pending Review', 'Pending Review', 'Pending Review'].map(Status => crm.putOrder({ Status }))
  const events = crm.retainedEvents.length
  const patched = await fetch(`${crm.url}/__sandbox/orders/${approved!}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ Status: 'Approved' }) })
  t.equal(patched.status, 200)
  t.ok(crm.updateOrder(rejected!.slice(0, 15), { Status: 'Rejected' }), 'in code, by either form of the id')
  t.equal(crm.retainedEvents.length, events, 'no platform event raised')
  t.equal((await fetch(`${crm.url}/__sandbox/orders/801000000000000AAA`, { method: 'PATCH', body: '{"Status":"Approved"}' })).status, 404, 'an order the org does not have')
  t.equal((await fetch(`${crm.url}/__sandbox/orders/${approved!}`, { method: 'PATCH', body: '{"Id":"x"}' })).status, 400, 'a field that is not writable')

  const ids = [waiting!, approved!, rejected!.slice(0, 15), '801000000000000AAA']
  const { status, body } = await rest('GET', `query?q=${encodeURIComponent(`SELECT Id, Status FROM Order WHERE Id IN (${ids.map(id => `'${id}'`).join(', ')})`)}`)
  t.equal(status, 200)
  t.same(body, {
    totalSize: 3,
    done: true,
    records: [
      { attributes: { type: 'Order', url: `/services/data/v60.0/sobjects/Order/${waiting!}` }, Id: waiting, Status: 'Pending Review' },
      { attributes: { type: 'Order', url: `/services/data/v60.0/sobjects/Order/${approved!}` }, Id: approved, Status: 'Approved' },
      { attributes: { type: 'Order', url: `/services/data/v60.0/sobjects/Order/${rejected!}` }, Id: rejected, Status: 'Rejected' }
    ]
  }, 'the orders it has, each with its attributes and its 18-character id')
})

t.test('writing a field the org does not have: INVALID_FIELD', async t => {
  const id = crm.putOrder({ Status: 'Pending Review' })
  const rejected = await rest('PATCH', `sobjects/Order/${id}`, { Status: 'Activated', Activation_Date__c: '2025-01-01' })
  t.equal(rejected.status, 400)
  t.same(rejected.body, [{ message: "No such column 'Activation_Date__c' on sobject of type Order", errorCode: 'INVALID_FIELD' }])
  t.equal(crm.order(id)?.Status, 'Pending Review', 'nothing was written')
  const readOnly = await rest('POST', 'sobjects/Order', { OrderNumber: '1' })
  t.match(readOnly.body, [{ errorCode: 'INVALID_FIELD_FOR_INSERT_UPDATE', fields: ['OrderNumber'] }])
})

t.test('the daily quota: REQUEST_LIMIT_EXCEEDED once used up', async t => {
  crm.setApiUsage({ used: 4999, max: 5000 })
  const last = await rest('GET', 'limits')
  t.equal(last.status, 200)
  t.equal(last.limitInfo, 'api-usage=5000/5000')
  const refused = await rest('GET', 'limits')
  t.equal(refused.status, 403)
  t.equal(refused.limitInfo, 'api-usage=5000/5000')
  t.same(refused.body, [{ message: 'TotalRequests Limit exceeded.', errorCode: 'REQUEST_LIMIT_EXCEEDED' }])
  crm.setApiUsage({ used: 0 })
})

t.test('expired sessions: 401 INVALID_SESSION_ID until a new token', async t => {
  crm.expireAccessTokens()
  const refused = await rest('GET', 'limits')
  t.equal(refused.status, 401)
  t.same(refused.body, [{ message: 'Session expired or invalid', errorCode: 'INVALID_SESSION_ID' }])
  token = 'not-a-token'
  t.equal((await rest('GET', 'limits')).status, 401)
  token = await accessToken()
  t.equal((await rest('GET', 'limits')).status, 200)
})

t.test('calls are recorded by route, without the bearer token', async t => {
  crm.resetCalls()
  const id = crm.putOrder({})
  await rest('PATCH', `sobjects/Order/${id}`, { Status: 'Activated' })
  const [call] = crm.calls
  t.match(call, { method: 'PATCH', route: 'rest/sobjects/Order', params: { id, body: { Status: 'Activated' } } })
  t.notOk(call?.headers.authorization)
})

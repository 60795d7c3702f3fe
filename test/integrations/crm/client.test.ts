import { generateKeyPairSync } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import { CrmClient, usageFrom, type CrmClientOptions } from '../../../integrations/crm/client.js'
import { CrmApiError, isCrmNotFound } from '../../../integrations/crm/errors.js'
import { DailyUsageStore } from '../../../integrations/crm/daily-usage.js'
import { testKeyPrefix } from '../../helpers/made.js'
import { startSandbox } from '../../../dev/sandbox/index.js'
import { json, stubServer } from '../../helpers/http-stub.js'
import { leaks, readable, upstreamClients } from '../../helpers/integrations.js'
import { crmDailyUsageKey } from '../../../plugins/app/redis-keys.js'

const sandbox = await startSandbox()
const { crm } = sandbox
const redis = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 })
const prefix = testKeyPrefix()
const accessTokens: string[] = []
const keys = new Set<string>()
const { recorded, errors, client, failure, closeClients } = upstreamClients((options: Partial<CrmClientOptions>, { log, onCall }) => new CrmClient({
  loginUrl: sandbox.settings.CRM_LOGIN_URL ?? '',
  clientId: sandbox.settings.CRM_CLIENT_ID ?? '',
  username: sandbox.settings.CRM_USERNAME ?? '',
  privateKey: sandbox.settings.CRM_PRIVATE_KEY ?? '',
  apiVersion: '60.0',
  usage: store(),
  log,
  onCall,
  ...options
}))
t.teardown(async () => {
  await closeClients()
  await sandbox.close()
  await redis.del(...keys)
  await redis.quit()
})

function store (keyPrefix = prefix, fallbackLimit?: number): DailyUsageStore {
  const created = new DailyUsageStore({ redis, key: crmDailyUsageKey(keyPrefix), ...(fallbackLimit === undefined ? {} : { fallbackLimit }), log: recorded.log })
  keys.add(created.key)
  return created
}

const tokenCalls = (): number => crm.calls.filter(call => call.route === 'oauth/token').length

const salesforce = client()
const UNKNOWN_ORDER = '801000000000000AAA'

t.afterEach(() => crm.clearFaults())

t.test('orders: create, read, update; null for an order that does not exist', async t => {
  const id = await salesforce.createOrder({ Status: 'Pending Review', Name: 'Mobile 5 GB', BillingOrderId__c: '42', EffectiveDate: '2025-06-01' })
  t.match(id, /^801\w{15}$/)
  t.match(await salesforce.getOrder(id), { Id: id, Status: 'Pending Review', BillingOrderId__c: '42', OrderNumber: /^\d{8}$/ })
  t.notOk(Object.hasOwn(await salesforce.getOrder(id) ?? {}, 'attributes'))
  await salesforce.updateOrder(id, { Status: 'Activated' })
  t.equal(crm.order(id)?.Status, 'Activated')
  t.equal(await salesforce.getOrder(UNKNOWN_ORDER), null)
  t.match(recorded.calls.at(-1), { upstream: 'crm', operation: 'GET sobjects/Order/{id}', outcome: 'ok' })
})

t.test('SOQL query: an order found by its billing order id, null when none carries it; a malformed query is refused', async t => {
  const id = crm.putOrder({ Status: 'Pending Review', BillingOrderId__c: '4242' })
  crm.putOrder({ Status: 'Pending Review', BillingOrderId__c: '4243' })
  t.equal(await salesforce.findOrderIdByBillingOrderId(4242), id)
  t.equal(await salesforce.findOrderIdByBillingOrderId(4244), null)
  t.match(crm.calls.at(-1), { method: 'GET', path: '/services/data/v60.0/query', route: 'rest/query' })
  t.match(recorded.calls.at(-1), { upstream: 'crm', operation: 'GET query', outcome: 'ok' })
  t.same(await salesforce.query(`SELECT Id, Status FROM Order WHERE Id IN ('${id}', '801000000000000AAA') AND Status = 'Pending Review'`), [{ Id: id, Status: 'Pending Review' }])
  t.match(await failure(salesforce.query('SELECT Id FROM Order WHERE')), { status: 400, errorCode: 'MALFORMED_QUERY' })
  t.match(await failure(salesforce.query('SELECT Colour__c FROM Order')), { status: 400, errorCode: 'INVALID_FIELD' })
})

t.test('REST errors: upstream_error with the errorCode; NOT_FOUND is recognisable', async t => {
  const id = crm.putOrder({ Status: 'Pending Review' })
  const invalid = await failure(salesforce.updateOrder(id, { Colour__c: 'red' } as never))
  t.type(invalid, CrmApiError)
  t.match(invalid, { failure: 'upstream_error', status: 400, errorCode: 'INVALID_FIELD', message: /INVALID_FIELD/ })
  t.notOk(isCrmNotFound(invalid))
  const missing = await failure(salesforce.request('PATCH', `sobjects/Order/${UNKNOWN_ORDER}`, { Status: 'Activated' }))
  t.ok(isCrmNotFound(missing))
  t.match(missing, { failure: 'upstream_error', status: 404 })
})

t.test('an order deleted, or an id that cannot be one: null, as for a missing order', async t => {
  const id = crm.putOrder({ Status: 'Pending Review' })
  crm.injectFault({ kind: 'error', route: 'rest/sobjects/Order', status: 404, code: 'ENTITY_IS_DELETED', message: 'entity is deleted', times: 1 })
  t.equal(await salesforce.getOrder(id), null)
  crm.injectFault({ kind: 'error', route: 'rest/sobjects/Order', status: 400, code: 'MALFORMED_ID', message: 'malformed id 801garbage', times: 1 })
  t.equal(await salesforce.getOrder('801garbage'), null)
  crm.injectFault({ kind: 'error', route: 'rest/sobjects/Order', status: 400, code: 'INVALID_QUERY_FILTER_OPERATOR', message: 'bad', times: 1 })
  t.match(await failure(salesforce.getOrder(id)), { failure: 'upstream_error', errorCode: 'INVALID_QUERY_FILTER_OPERATOR' }, 'another 400 stays an error')
})

t.test('a CRM answering past the sandbox: an empty 200 to a PATCH succeeds; a token refusal that is not JSON is auth_failed', async t => {
  let tokenAnswer = { status: 200, body: '' }
  const loginUrl = await stubServer(t, (request, _body, instanceUrl) => {
    if (request.url === '/services/oauth2/token') {
      const { status, body } = tokenAnswer
      return status === 200
        ? json(200, { access_token: 'token-1', instance_url: instanceUrl, token_type: 'Bearer' })
        : { status, headers: { 'content-type': 'text/html' }, body }
    }
    // Salesforce documents 200 as the answer of some PATCH requests; this one has no body.
    return { status: 200, headers: { 'sforce-limit-info': 'api-usage=5/15000' } }
  })
  const org = client({ loginUrl })
  await org.updateOrder('801000000000001AAA', { Status: 'Activated' })
  tokenAnswer = { status: 400, body: '<html>Bad Request</html>' }
  t.match(await failure(client({ loginUrl }).session()),
    { failure: 'auth_failed', message: 'POST oauth2/token: HTTP 400' })
})

t.test('request: any REST resource, the JSON answer', async t => {
  const limits = await salesforce.request<{ DailyApiRequests: { Max: number } }>('GET', 'limits')
  t.equal(limits.DailyApiRequests.Max, crm.apiUsage.max)
})

t.test('session: minted once, shared by concurrent callers', async t => {
  const fresh = client()
  const before = tokenCalls()
  const sessions = await Promise.all([fresh.session(), fresh.session(), fresh.getLimits(), fresh.getOrder(UNKNOWN_ORDER)])
  t.equal(tokenCalls() - before, 1)
  const session = await fresh.session()
  t.same(sessions[0], session)
  t.match(session, { accessToken: /^00D\w{12}!/, instanceUrl: crm.instanceUrl })
  accessTokens.push(session.accessToken)
  t.match(recorded.calls.filter(call => call.operation === 'POST oauth2/token').at(-1), { upstream: 'crm', outcome: 'ok' })
})

t.test('revoked sessions: one new token, however many calls were refused', async t => {
  const fresh = client()
  const first = await fresh.session()
  crm.expireAccessTokens()
  const before = tokenCalls()
  await Promise.all([fresh.getLimits(), fresh.getLimits(), fresh.getOrder(UNKNOWN_ORDER), fresh.getLimits()])
  t.equal(tokenCalls() - before, 1, 'exactly one re-mint')
  const second = await fresh.session()
  t.not(second.accessToken, first.accessToken)
  accessTokens.push(first.accessToken, second.accessToken)
  await fresh.getLimits()
  t.equal(tokenCalls() - before, 1, 'the new token is kept')
})

t.test('invalidateSession: only the session that was refused is dropped', async t => {
  const fresh = client()
  const stale = await fresh.session()
  fresh.invalidateSession(stale)
  const renewed = await fresh.session()
  t.not(renewed.accessToken, stale.accessToken)
  fresh.invalidateSession(stale)
  t.same(await fresh.session(), renewed, 'a refusal of the old session leaves the new one alone')
  fresh.invalidateSession()
  t.not((await fresh.session()).accessToken, renewed.accessToken)
})

t.test('a session refused twice: auth_failed after a single retry', async t => {
  await salesforce.session()
  crm.injectFault({ kind: 'error', route: 'rest', status: 401, code: 'INVALID_SESSION_ID', message: 'Session expired or invalid', times: 2 })
  const before = tokenCalls()
  const error = await failure(salesforce.getLimits())
  t.match(error, { failure: 'auth_failed', status: 401, errorCode: 'INVALID_SESSION_ID' })
  t.equal(tokenCalls() - before, 1)
  t.equal(crm.calls.filter(call => call.route === 'rest/limits').length > 0, true)
})

t.test('assertions the CRM refuses: auth_failed', async t => {
  const otherKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()
  const cases: Array<[string, Partial<CrmClientOptions>, RegExp]> = [
    ['signed with another key', { privateKey: otherKey }, /invalid_grant: invalid assertion/],
    ['another issuer', { clientId: '3MVG9someoneElse' }, /invalid_client_id/],
    ['another subject', { username: 'nobody@example.com' }, /invalid_grant: user hasn't approved this consumer/],
    ['another audience', { audience: 'https://login.salesforce.com' }, /audience is invalid/]
  ]
  for (const [name, options, reason] of cases) {
    const wrong = client(options)
    t.match(await failure(wrong.getLimits()), { failure: 'auth_failed', upstream: 'crm', message: reason }, name)
    t.match(await failure(wrong.health(AbortSignal.timeout(1000))), { failure: 'auth_failed' }, `${name}: health`)
  }
})

t.test('an expired assertion: auth_failed', async t => {
  const late = client()
  // The assertion is signed synchronously when the mint starts: signed ten minutes in the past, it
  // reaches the CRM already expired. The clock is back before anything else runs.
  const now = Date.now
  Date.now = () => now() - 600_000
  const minting = late.session()
  Date.now = now
  t.match(await failure(minting), { failure: 'auth_failed', message: /expired authorization code/ })
  t.ok((await late.session()).accessToken, 'a failed mint is not kept: the next caller mints again')
})

t.test('the token endpoint: an OAuth error is auth_failed, an HTTP 5xx is http_5xx', async t => {
  crm.injectFault({ kind: 'error', route: 'oauth/token', code: 'invalid_client', message: 'invalid client credentials', times: 1 })
  t.match(await failure(client().session()), { failure: 'auth_failed', message: /invalid_client/ })
  crm.injectFault({ kind: 'http5xx', route: 'oauth/token', status: 503, times: 1 })
  t.match(await failure(client().getLimits()), { failure: 'http_5xx', message: 'POST oauth2/token: HTTP 503' })
})

t.test('REQUEST_LIMIT_EXCEEDED: quota_exceeded', async t => {
  const usage = crm.apiUsage
  t.teardown(() => crm.setApiUsage(usage))
  await salesforce.session()
  crm.setApiUsage({ used: usage.max })
  t.match(await failure(salesforce.createOrder({ Status: 'Pending Review' })), { failure: 'quota_exceeded', status: 403, errorCode: 'REQUEST_LIMIT_EXCEEDED' })
  t.match(recorded.calls.at(-1), { operation: 'POST sobjects/Order', outcome: 'quota_exceeded' })
})

t.test('HTTP 5xx: http_5xx', async t => {
  crm.injectFault({ kind: 'http5xx', route: 'rest', status: 500, body: 'Internal Server Error', times: 1 })
  t.match(await failure(salesforce.getOrder(UNKNOWN_ORDER)), { failure: 'http_5xx', message: 'GET sobjects/Order/{id}: HTTP 500' })
})

t.test('a black hole: timeout within timeoutMs, on the REST API and on the token endpoint', async t => {
  // Long enough that the call after the black hole, a mint and a REST call, fits on a machine short of CPU.
  const TIMEOUT_MS = 1000
  const quick = client({ timeoutMs: TIMEOUT_MS })
  await quick.session()
  crm.injectFault({ kind: 'blackhole', route: 'rest', times: 1 })
  // The black hole never answers: only the client's own deadline ends each call, as its message says.
  t.match(await failure(quick.getLimits()), { failure: 'timeout', message: new RegExp(`no answer within ${TIMEOUT_MS} ms`) })

  const unminted = client({ timeoutMs: TIMEOUT_MS })
  crm.injectFault({ kind: 'blackhole', route: 'oauth/token', times: 1 })
  t.match(await failure(unminted.session()), { failure: 'timeout', message: `POST oauth2/token: no answer within ${TIMEOUT_MS} ms` })
  t.ok(await unminted.getLimits(), 'the next call mints again')
})

t.test('connection refused: connection_refused', async t => {
  await crm.down()
  t.teardown(() => crm.up())
  t.match(await failure(salesforce.getLimits()), { failure: 'connection_refused' })
  t.match(await failure(client().session()), { failure: 'connection_refused' })
  await crm.up()
  t.ok(await salesforce.getLimits())
})

t.test('daily usage: the figures of the last CRM answer, shared by every instance', async t => {
  const keyPrefix = `${prefix}shared:`
  const [storeA, storeB] = [store(keyPrefix, 1000), store(keyPrefix, 1000)]
  const otherRedis = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 })
  t.teardown(() => otherRedis.quit())
  const storeC = new DailyUsageStore({ redis: otherRedis, key: crmDailyUsageKey(keyPrefix), fallbackLimit: 1000 })
  t.same(await storeA.read(), { used: null, limit: 1000, limitSource: 'configured', reportedAt: null }, 'the configured limit until the CRM reports one')

  const instanceA = client({ usage: storeA })
  const instanceB = client({ usage: storeB })
  await instanceA.getOrder(UNKNOWN_ORDER)
  const afterA = crm.apiUsage
  t.match(await storeA.read(), { used: afterA.used, limit: afterA.max, limitSource: 'crm', reportedAt: String })
  t.match(await storeC.read(), { used: afterA.used, limit: afterA.max }, 'another connection, another instance: the same figure')

  crm.setApiUsage({ used: afterA.used + 500, max: 20_000 })
  await instanceB.createOrder({ Status: 'Pending Review' })
  const afterB = crm.apiUsage
  t.match(await storeB.read(), { used: afterB.used, limit: 20_000, limitSource: 'crm' })
  t.match(await storeA.read(), { used: afterB.used, limit: 20_000 }, 'instance A reports what B saw')
  t.match(await redis.hgetall(`${keyPrefix}crm:daily-usage`), { used: String(afterB.used), limit: '20000', reportedAt: /^\d+$/ })
})

t.test('getLimits: the DailyApiRequests figures, recorded as the CRM limit', async t => {
  const keyPrefix = `${prefix}limits:`
  const usage = store(keyPrefix, 5)
  const limits = await client({ usage }).getLimits()
  t.same(limits, { used: crm.apiUsage.used, limit: crm.apiUsage.max })
  t.match(await usage.read(), { ...limits, limitSource: 'crm' })
})

t.test('Sforce-Limit-Info: api-usage wherever it stands among the other usages', async t => {
  const usage = (header: string | string[] | undefined) => usageFrom({ headers: { 'sforce-limit-info': header } })
  t.same(usage('api-usage=25/5000'), { used: 25, limit: 5000 })
  t.same(usage('api-usage=25/5000; per-app-api-usage=17/250(appName=portal)'), { used: 25, limit: 5000 })
  t.same(usage('per-app-api-usage=17/250(appName=portal);api-usage=26/5000'), { used: 26, limit: 5000 })
  t.same(usage('api-bursts=1/750, api-usage=27/5000'), { used: 27, limit: 5000 })
  t.same(usage(['per-app-api-usage=17/250(appName=portal)', 'api-usage=28/5000']), { used: 28, limit: 5000 })
  t.equal(usage('per-app-api-usage=17/250(appName=portal)'), undefined, 'a per-app figure is not the org\'s')
  t.equal(usage(undefined), undefined)
})

t.test('limits refresh: at start and every interval, stopped by close; failures are logged, not thrown', async t => {
  const refreshing = client({ usage: store(`${prefix}refresh:`) })
  const limitsCalls = (): number => crm.calls.filter(call => call.route === 'rest/limits').length
  const before = limitsCalls()
  crm.injectFault({ kind: 'http5xx', route: 'rest/limits', status: 503, times: 1 })
  const errorLines = recorded.lines.filter(line => line.level === 'error').length
  refreshing.startLimitsRefresh(50)
  refreshing.startLimitsRefresh(50)
  while (limitsCalls() - before < 3) await sleep(10)
  t.ok(recorded.lines.filter(line => line.level === 'error').length > errorLines, 'the failed refresh was logged at error')
  await refreshing.close()
  const after = limitsCalls()
  await sleep(150)
  t.equal(limitsCalls(), after, 'no refresh after close')
})

t.test('no private key, assertion or access token in any log line or error message', async t => {
  t.ok(recorded.lines.length > 5 && errors.length > 10, 'there was plenty to read')
  const texts = readable(recorded.lines, errors)
  const keyLines = crm.privateKey.split('\n').filter(line => line.length > 20 && !line.startsWith('-----'))
  accessTokens.push((await salesforce.session()).accessToken)
  t.same(leaks(texts, [...keyLines, ...accessTokens]), [])
  t.notOk(texts.some(text => /eyJ[\w-]+\.eyJ/.test(text)), 'no JWT')
})

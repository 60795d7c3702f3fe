import { generateKeyPairSync, sign } from 'node:crypto'
import t from 'tap'
import { CrmSimulator } from '../../../dev/sandbox/crm.js'

const crm = await new CrmSimulator().start()
t.teardown(() => crm.close())

function assertion (claims: Record<string, unknown>, privateKey = crm.privateKey): string {
  const encode = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  const unsigned = `${encode({ alg: 'RS256' })}.${encode(claims)}`
  return `${unsigned}.${sign('RSA-SHA256', Buffer.from(unsigned), privateKey).toString('base64url')}`
}

function claims (overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { iss: crm.clientId, sub: crm.username, aud: crm.loginUrl, exp: Math.floor(Date.now() / 1000) + 180, ...overrides }
}

async function requestToken (jwt: string, grantType = 'urn:ietf:params:oauth:grant-type:jwt-bearer'): Promise<{ status: number, body: Record<string, unknown> }> {
  const response = await fetch(`${crm.loginUrl}/services/oauth2/token`, {
    method: 'POST',
    body: new URLSearchParams({ grant_type: grantType, assertion: jwt })
  })
  return { status: response.status, body: await response.json() as Record<string, unknown> }
}

t.test('a valid assertion gets an access token for the instance', async t => {
  const { status, body } = await requestToken(assertion(claims()))
  t.equal(status, 200)
  t.match(body, { access_token: /^00D\w{12}!/, scope: 'api', instance_url: crm.instanceUrl, token_type: 'Bearer' })
  t.match(body.id, new RegExp(`^${crm.loginUrl}/id/00D\\w{15}/005\\w{15}$`))
  const limits = await fetch(`${String(body.instance_url)}/services/data/v60.0/limits`, {
    headers: { authorization: `Bearer ${String(body.access_token)}` }
  })
  t.equal(limits.status, 200, 'the token opens the REST API')
})

t.test('the audience may carry a trailing slash', async t => {
  const { status } = await requestToken(assertion(claims({ aud: `${crm.loginUrl}/` })))
  t.equal(status, 200)
})

t.test('refused assertions: HTTP 400 with Salesforce error descriptions', async t => {
  const otherKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey
  const now = Math.floor(Date.now() / 1000)
  const cases: Array<[string, string, string, string]> = [
    ['signed with another key', assertion(claims(), otherKey.export({ type: 'pkcs8', format: 'pem' }).toString()), 'invalid_grant', 'invalid assertion'],
    ['another consumer key', assertion(claims({ iss: '3MVG9someoneElse' })), 'invalid_client_id', 'client identifier invalid'],
    ['an unknown user', assertion(claims({ sub: 'nobody@example.com' })), 'invalid_grant', "user hasn't approved this consumer"],
    ['another audience', assertion(claims({ aud: 'https://login.salesforce.com' })), 'invalid_grant', 'audience is invalid'],
    ['an expired assertion', assertion(claims({ exp: now - 5 })), 'invalid_grant', 'expired authorization code'],
    ['an expiry hours away', assertion(claims({ exp: now + 7200 })), 'invalid_grant', 'invalid assertion'],
    ['not a JWT', 'not-a-jwt', 'invalid_grant', 'invalid assertion']
  ]
  for (const [name, jwt, error, description] of cases) {
    const { status, body } = await requestToken(jwt)
    t.equal(status, 400, name)
    t.same(body, { error, error_description: description }, name)
  }
})

t.test('another grant type: unsupported_grant_type', async t => {
  const { status, body } = await requestToken(assertion(claims()), 'password')
  t.equal(status, 400)
  t.same(body, { error: 'unsupported_grant_type', error_description: 'grant type not supported' })
})

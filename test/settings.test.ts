import t from 'tap'
import { ConfigError, loadConfig } from '../settings.js'
import { runServer } from './helpers/service-process.js'
import { COMPLETE_PRODUCTION } from './helpers/made.js'

const base = { NODE_ENV: 'test' }

/** The setting a bad configuration is rejected for. */
function rejectedSetting (env: NodeJS.ProcessEnv): string | undefined {
  try {
    loadConfig(env)
  } catch (error) {
    if (error instanceof ConfigError) return error.setting
    throw error
  }
  return undefined
}

const invalid: Array<[string, string]> = [
  ['PORT', 'abc'],
  ['PORT', '70000'],
  ['DATABASE_URL', 'not a url'],
  ['REDIS_URL', '::'],
  ['LOG_LEVEL', 'loud'],
  ['HEALTH_CHECK_TIMEOUT_MS', '-5'],
  ['CRM_EVENTS_ENABLED', 'maybe'],
  ['CRM_EVENTS_REPLAY', 'SOME'],
  ['AUTH_BLACKLIST_FAIL_CLOSED', 'perhaps'],
  ['BILLING_API_URL', 'billing'],
  ['CRM_API_VERSION', 'sixty'],
  ['CRM_DAILY_API_LIMIT', '0'],
  ['JWT_SECRET', 'short'],
  ['CORS_ORIGIN', 'portal'],
  ['CORS_ORIGIN', 'https://portal.example.com,ftp://files.example.com'],
  ['PUBLIC_ORIGIN', 'https://portal.example.com/app'],
  ['PUBLIC_ORIGIN', 'portal.example.com'],
  ['PUBLIC_ORIGIN', ' , '],
  ['CRM_PRIVATE_KEY', 'not a key'],
  ['CRM_PRIVATE_KEY_PATH', '/nonexistent/key.pem'],
  ['BILLING_PAYMENT_METHOD', 'Bank Transfer'],
  // An Order's id, where an Account's is wanted.
  ['CRM_ORDER_ACCOUNT_ID', '8015g00000435Ai'],
  // A lease this long would let a takeover come later than the contract's 30 s.
  ['CRM_EVENTS_LEASE_TTL_MS', '30000'],
  ['CRM_ORDER_CANCELLED_STATUSES', ' , '],
  // Statuses an order goes on from.
  ['CRM_ORDER_CANCELLED_STATUSES', 'Cancelled,Pending Review'],
  ['CRM_ORDER_CANCELLED_STATUSES', 'Activated']
]

t.test('every invalid setting is reported by name', async (t) => {
  for (const [name, value] of invalid) {
    t.equal(rejectedSetting({ ...base, [name]: value }), name, `${name}=${value}`)
  }
})

t.test('secrets are not echoed in the message, nor the password of a URL', async (t) => {
  const error = t.throws(() => loadConfig({ ...base, JWT_SECRET: 'short-secret' })) as ConfigError
  t.notMatch(error.message, 'short-secret')
  for (const [name, value] of [
    ['DATABASE_URL', 'postgres://portal:s3cretpw@db:99999/portal'],
    ['DATABASE_URL', 'postgres://portal:s3cretpw@x@db:99999/portal'],
    ['DATABASE_URL', 'postgres://db:99999/portal?user=portal&password=s3cretpw'],
    ['REDIS_URL', 'redis://:s3cretpw@cache:99999'],
    ['REDIS_URL', 'redis://:s3cret#pw@cache:6379'],
    ['BILLING_API_URL', 'https://api:s3cretpw@billing.example.com:99999/includes/api.php']
  ]) {
    const refused = t.throws(() => loadConfig({ ...base, [name!]: value })) as ConfigError
    t.match(refused.message, name!, `${name}: named`)
    t.notMatch(refused.message, /s3cret/, `${value}: its password hidden`)
  }
})

t.test('defaults and conversions', async (t) => {
  const { config, warnings } = loadConfig({ ...base, PORT: '8080', CRM_EVENTS_ENABLED: 'true', CRM_DAILY_API_LIMIT: '15000' })
  t.equal(config.PORT, 8080)
  t.equal(config.CRM_EVENTS_ENABLED, true)
  t.equal(config.CRM_DAILY_API_LIMIT, 15000)
  t.equal(config.AUTH_BLACKLIST_FAIL_CLOSED, true)
  t.equal(config.HEALTH_CHECK_TIMEOUT_MS, 1000)
  t.equal(config.SERVICE_NAME, 'portal-bff')
  t.equal(config.BILLING_PAYMENT_METHOD, undefined, 'no payment method: the billing client chooses one WHMCS accepts')
  t.equal(config.DATABASE_URL, 'postgres://postgres@127.0.0.1:5432/postgres')
  t.ok(config.JWT_SECRET.length >= 32, 'a random JWT secret outside production')
  t.match(warnings, [/JWT_SECRET/])
  t.ok(config.missingUpstreamSettings.includes('BILLING_API_URL'))
  t.equal(config.SHUTDOWN_DELAY_MS, 0, 'no balancer to wait for outside production')
  t.equal(loadConfig(COMPLETE_PRODUCTION).config.SHUTDOWN_DELAY_MS, 5000, 'in production, time for the balancer to stop sending')
})

t.test('CRM_ORDER_CANCELLED_STATUSES: Cancelled and Rejected unless set, a comma-separated list', async (t) => {
  t.same(loadConfig(base).config.crmOrderCancelledStatuses, ['Cancelled', 'Rejected'])
  t.same(loadConfig({ ...base, CRM_ORDER_CANCELLED_STATUSES: ' Declined,Withdrawn ,Declined' }).config.crmOrderCancelledStatuses, ['Declined', 'Withdrawn'])
})

t.test('PUBLIC_ORIGIN and CORS_ORIGIN: comma-separated origins, each as a browser\'s Origin header spells it, once; unset, none', async (t) => {
  const { config } = loadConfig({ ...base, PUBLIC_ORIGIN: ' https://Portal.Example.com:443/ , http://localhost:8443,https://portal.example.com', CORS_ORIGIN: 'https://portal.example.com' })
  t.same(config.publicOrigins, ['https://portal.example.com', 'http://localhost:8443'])
  t.same(config.corsOrigins, ['https://portal.example.com'])
  t.same(loadConfig(base).config.publicOrigins, [])
  t.same(loadConfig(base).config.corsOrigins, [])
  const error = t.throws(() => loadConfig({ ...base, PUBLIC_ORIGIN: 'https://portal.example.com/app' })) as ConfigError
  t.equal(error.message, 'Invalid setting PUBLIC_ORIGIN: must be comma-separated origins, scheme://host[:port] without a path (got \'https://portal.example.com/app\')')
})

t.test('OpenID Connect: the provider and its client credentials given together; password sign-in off with it unless set', async (t) => {
  const withoutProvider = loadConfig(base).config
  t.equal(withoutProvider.oidc, undefined)
  t.equal(withoutProvider.PASSWORD_SIGN_IN, true, 'without a provider, password sign-in as before')
  const provider = { OIDC_ISSUER: 'https://billing.example.com', OIDC_CLIENT_ID: 'portal', OIDC_CLIENT_SECRET: 'client-s3cret' }
  const { config } = loadConfig({ ...base, ...provider })
  t.same(config.oidc, { issuer: 'https://billing.example.com', clientId: 'portal', clientSecret: 'client-s3cret', scopes: 'openid profile email' })
  t.equal(config.PASSWORD_SIGN_IN, false, 'with a provider, the provider signs browsers in')
  t.equal(loadConfig({ ...base, ...provider, PASSWORD_SIGN_IN: 'true' }).config.PASSWORD_SIGN_IN, true)
  t.equal(loadConfig({ ...base, PASSWORD_SIGN_IN: 'false' }).config.PASSWORD_SIGN_IN, false)
  t.equal(rejectedSetting({ ...base, OIDC_ISSUER: provider.OIDC_ISSUER, OIDC_CLIENT_ID: 'portal' }), 'OIDC_CLIENT_SECRET')
  t.equal(rejectedSetting({ ...base, OIDC_ISSUER: provider.OIDC_ISSUER, OIDC_CLIENT_SECRET: 'client-s3cret' }), 'OIDC_CLIENT_ID')
  t.equal(rejectedSetting({ ...base, OIDC_CLIENT_ID: 'portal' }), 'OIDC_CLIENT_ID', 'a client of no provider')
  t.equal(rejectedSetting({ ...base, ...provider, OIDC_ISSUER: 'billing' }), 'OIDC_ISSUER')
  t.equal(rejectedSetting({ ...base, ...provider, OIDC_SCOPES: 'profile email' }), 'OIDC_SCOPES', 'openid is what makes it OpenID Connect')
  t.equal(loadConfig({ ...base, ...provider, OIDC_SCOPES: 'email openid offline_access' }).config.oidc?.scopes, 'email openid offline_access')
  const refused = t.throws(() => loadConfig({ ...base, ...provider, OIDC_CLIENT_ID: 'portal', PORT: 'x' })) as ConfigError
  t.notMatch(refused.message, 'client-s3cret', 'the client secret is never echoed')
})

t.test('production without the platform-event subscription starts, and says that approved orders reach provisioning only through the reconciliation', async (t) => {
  const { warnings } = loadConfig(COMPLETE_PRODUCTION)
  t.equal(warnings.filter((warning) => /^CRM_EVENTS_ENABLED is not true: .*only through the reconciliation, which asks the CRM every ORDERS_RECONCILE_INTERVAL_S \(300 s\)$/.test(warning)).length, 1, 'one warning')
  t.notMatch(loadConfig({ ...COMPLETE_PRODUCTION, CRM_EVENTS_ENABLED: 'true' }).warnings.join('\n'), /CRM_EVENTS_ENABLED/, 'not with it on')
  t.notMatch(loadConfig(base).warnings.join('\n'), /CRM_EVENTS_ENABLED/, 'nor outside production')
})

t.test('outside production an upstream is configured whole or left to the sandbox, never in part', async (t) => {
  t.same(loadConfig({ ...base }).config.missingUpstreamSettings.length, 9, 'none given: the sandbox fills in all')
  const billing = { BILLING_API_URL: 'https://billing.example/includes/api.php', BILLING_API_IDENTIFIER: 'id', BILLING_API_SECRET: 'secret' }
  t.same(loadConfig({ ...base, ...billing }).config.missingUpstreamSettings.filter((name) => name.startsWith('BILLING')), [], 'billing given whole')
  t.equal(rejectedSetting({ ...base, BILLING_API_URL: billing.BILLING_API_URL }), 'BILLING_API_IDENTIFIER', 'a real URL without its credentials')
  t.equal(rejectedSetting({ ...base, TELECOM_API_KEY: 'key' }), 'TELECOM_API_URL')
  t.equal(rejectedSetting({ ...base, CRM_LOGIN_URL: 'https://login.example', CRM_CLIENT_ID: 'c', CRM_USERNAME: 'u' }), 'CRM_PRIVATE_KEY')
  t.equal(rejectedSetting({ ...base, CRM_LOGIN_URL: 'https://login.example', CRM_CLIENT_ID: 'c', CRM_USERNAME: 'u', CRM_PRIVATE_KEY_PATH: '/nonexistent/key.pem' }), 'CRM_PRIVATE_KEY_PATH', 'a key file counts as the key')
})

t.test('production requires every upstream setting and JWT_SECRET', async (t) => {
  t.equal(rejectedSetting({ NODE_ENV: 'production' }), 'DATABASE_URL')
  const complete = COMPLETE_PRODUCTION
  t.equal(loadConfig(complete).config.isProduction, true)
  for (const name of Object.keys(complete).filter((name) => name !== 'NODE_ENV')) {
    const { [name]: _omitted, ...rest } = complete
    t.equal(rejectedSetting(rest), name === 'CRM_PRIVATE_KEY' ? 'CRM_PRIVATE_KEY or CRM_PRIVATE_KEY_PATH' : name, `without ${name}`)
  }
})

t.test('the server exits non-zero with one line naming the setting', async (t) => {
  const bad = runServer({ NODE_ENV: 'test', PORT: 'eighty' })
  t.not(await bad.exit, 0)
  t.match(bad.stderr().trim(), /^Invalid setting PORT: .*'eighty'/)

  const publicOrigin = runServer({ NODE_ENV: 'test', PUBLIC_ORIGIN: 'https://portal.example.com/portal/' })
  t.not(await publicOrigin.exit, 0)
  t.match(publicOrigin.stderr().trim(), /^Invalid setting PUBLIC_ORIGIN: must be comma-separated origins/)

  const production = runServer({ NODE_ENV: 'production', DATABASE_URL: 'postgres://db/x', REDIS_URL: 'redis://r:6379' })
  t.not(await production.exit, 0)
  t.match(production.stderr(), /Invalid setting BILLING_API_URL: required in production/)
})

t.test('production without JWT_SECRET refuses to start', async (t) => {
  const { JWT_SECRET: _omitted, ...withoutSecret } = COMPLETE_PRODUCTION
  const server = runServer(withoutSecret)
  t.not(await server.exit, 0)
  t.match(server.stderr().trim(), /^Invalid setting JWT_SECRET: required in production \(at least 32 characters: [^\n]+\)$/, 'one line, saying what it must be')
})

t.test('every invalid setting is reported at once, in one message, each with the values it takes', async (t) => {
  const error = t.throws(() => loadConfig({ ...base, LOG_LEVEL: 'verbose', PORT: 'eighty', CRM_EVENTS_ENABLED: 'maybe', DATABASE_URL: 'not a url', TRUST_PROXY: ',' })) as ConfigError
  t.same(error.problems.map(({ setting }) => setting).sort(), ['CRM_EVENTS_ENABLED', 'DATABASE_URL', 'LOG_LEVEL', 'PORT', 'TRUST_PROXY'])
  const lines = error.message.split('\n')
  t.equal(lines.length, 5, 'one line each')
  t.ok(lines.includes('Invalid setting LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent (got \'verbose\')'), 'LOG_LEVEL lists the levels')
  t.ok(lines.includes('Invalid setting PORT: must be a whole number from 0 to 65535 (got \'eighty\')'), 'PORT gives its range')
  t.ok(lines.includes('Invalid setting CRM_EVENTS_ENABLED: must be true or false (got \'maybe\')'))
  t.ok(lines.includes('Invalid setting DATABASE_URL: must be a URL (got \'not a url\')'))
})

t.test('production with no settings at all names every required setting in one message', async (t) => {
  const error = t.throws(() => loadConfig({ NODE_ENV: 'production' })) as ConfigError
  const required = ['DATABASE_URL', 'REDIS_URL', 'BILLING_API_URL', 'BILLING_API_IDENTIFIER', 'BILLING_API_SECRET', 'CRM_LOGIN_URL', 'CRM_CLIENT_ID', 'CRM_USERNAME', 'CRM_PRIVATE_KEY or CRM_PRIVATE_KEY_PATH', 'TELECOM_API_URL', 'TELECOM_API_KEY', 'JWT_SECRET']
  t.same(error.problems.map(({ setting }) => setting), required)
  t.ok(error.problems.every(({ problem }) => problem.startsWith('required in production (')), 'each required in production, with what it is')
  t.match(error.message, /Invalid setting DATABASE_URL: required in production \(a URL: PostgreSQL connection URL\)/)

  const server = runServer({ NODE_ENV: 'production' })
  t.equal(await server.exit, 1)
  t.same(server.stderr().trim().split('\n').map((line) => /^Invalid setting (.+?): required in production/.exec(line)?.[1]), required, 'the start says them all, once each')
})

import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { ConfigError, loadConfig } from '../../../settings.js'
import { redisConnectionOptions } from '../../../plugins/external/redis-connection.js'
import { orderStatusChannel, revocationChannel } from '../../../plugins/app/redis-keys.js'
import { buildTestApp, testEnv } from '../../helpers/app.js'
import { PrivateSentinelSet, SENTINEL_DOWN_AFTER_MS, SENTINEL_FAILOVER_TIMEOUT_MS } from '../../helpers/private-sentinel.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'

// Measured on loopback (down-after 1 s): the Sentinels name the replica 2.2 to 3.2 s after the
// primary fails. Killed, the service works again 2.3 to 3.1 s after (its reconnection attempts
// are at most 2 s apart); hung, 3.7 to 5.0 s after (the failover announcement drops its
// connections, destroyed after one command timeout). The bound leaves room for a slow machine,
// not for a second election (twice failover-timeout later).
const RECOVERY_BOUND_MS = 10_000

function rejectedSetting (env: Record<string, string>): string | undefined {
  try {
    loadConfig(testEnv(env))
  } catch (error) {
    if (error instanceof ConfigError) return error.setting
    throw error
  }
  return undefined
}

function testConfigOf (env: Record<string, string>) {
  return loadConfig(testEnv(env)).config
}

t.test('REDIS_SENTINELS and REDIS_SENTINEL_NAME: both or neither, each entry host:port; REDIS_URL keeps the credentials and database', async (t) => {
  t.equal(rejectedSetting({ REDIS_SENTINELS: '127.0.0.1:26379' }), 'REDIS_SENTINEL_NAME')
  t.equal(rejectedSetting({ REDIS_SENTINEL_NAME: 'portal' }), 'REDIS_SENTINELS')
  t.equal(rejectedSetting({ REDIS_SENTINEL_PASSWORD: 'sentinel-secret' }), 'REDIS_SENTINEL_PASSWORD', 'the Sentinels\' password without Sentinels is refused: Redis\'s own goes in REDIS_URL')
  for (const bad of ['sentinel-1', 'sentinel-1:0', 'sentinel-1:70000', ' , ', 'a:1,b']) {
    t.equal(rejectedSetting({ REDIS_SENTINELS: bad, REDIS_SENTINEL_NAME: 'portal' }), 'REDIS_SENTINELS', `'${bad}' refused`)
  }

  const config = testConfigOf({ REDIS_URL: 'rediss://app:p%40ss@ignored.example:6390/3', REDIS_SENTINELS: 'sentinel-1:26379, [::1]:26380', REDIS_SENTINEL_NAME: 'portal' })
  t.match(redisConnectionOptions(config), {
    sentinels: [{ host: 'sentinel-1', port: 26379 }, { host: '::1', port: 26380 }],
    name: 'portal',
    username: 'app',
    password: 'p@ss',
    db: 3,
    tls: {},
    enableTLSForSentinelMode: true,
    failoverDetector: true
  })
  t.notOk('host' in redisConnectionOptions(config), 'the URL\'s host is not used')
  t.notOk(redisConnectionOptions(config).sentinelPassword, 'no password for Sentinels that require none')
  const guarded = testConfigOf({ REDIS_SENTINELS: 'sentinel-1:26379', REDIS_SENTINEL_NAME: 'portal', REDIS_SENTINEL_PASSWORD: 'sentinel-secret' })
  t.equal(redisConnectionOptions(guarded).sentinelPassword, 'sentinel-secret', 'REDIS_SENTINEL_PASSWORD signs in to the Sentinels')
  t.match(redisConnectionOptions(testConfigOf({ REDIS_URL: 'redis://:secret@cache.example:6390/2' })), { host: 'cache.example', port: 6390, password: 'secret', db: 2 })
  t.notOk('sentinels' in redisConnectionOptions(testConfigOf({})), 'without Sentinels, REDIS_URL is Redis')
})

/** Whether the service serves again: /health says the cache is ok, a sign-in and an authenticated request succeed. */
async function works (app: FastifyInstance): Promise<boolean> {
  const health = await app.inject('/health')
  if (health.json().checks?.cache !== 'ok') return false
  const token = await login(app)
  return (await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode === 200
}

/** The pub/sub connection listens on the promoted replica, the rate limiter counts there, and the job queue takes and runs a provisioning job there. */
async function worksOnPromoted (t: Test, app: FastifyInstance, set: PrivateSentinelSet): Promise<void> {
  const prefix = app.config.REDIS_KEY_PREFIX
  const promoted = set.replica.client(t)
  await waitFor('both channels subscribed on the promoted replica', async () => {
    const [, revocations, , orderStatus] = await promoted.pubsub('NUMSUB', revocationChannel(prefix, 0), orderStatusChannel(prefix, 0)) as [string, number, string, number]
    return revocations >= 1 && orderStatus >= 1
  }, 5000)
  t.pass('the revocation and order status channels are subscribed on the promoted replica')

  const token = await login(app)
  const remaining = async () => Number((await app.inject({ url: '/api/invoices', headers: bearer(token) })).headers['x-ratelimit-remaining'])
  const first = await remaining()
  t.equal(await remaining(), first - 1, 'the rate limiter counts there (it uses the service\'s client)')

  const placed = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })
  t.equal(placed.statusCode, 201, 'an order is placed')
  await app.orders.jobs.enqueue(placed.json().crmOrderId)
  await waitFor('the order provisioned', async () => (await app.orders.store.findByCrmId(placed.json().crmOrderId))?.status === 'Active', 15_000)
  t.pass('the job queue took the provisioning job and ran it on the promoted replica')
}

/** The service on the set, signing in and polling as often as the tests below do. */
function buildOnSentinels (t: Test, set: PrivateSentinelSet, overrides: Record<string, string> = {}): Promise<FastifyInstance> {
  return buildTestApp(t, {
    ...overrides,
    // Its host is not asked: the Sentinels name the primary.
    REDIS_URL: 'redis://unused.invalid:6379',
    REDIS_SENTINELS: set.sentinelsSetting,
    REDIS_SENTINEL_NAME: set.name,
    HEALTH_CHECK_CACHE_MS: '0',
    // The polling signs in every few tens of milliseconds, failures included.
    LOGIN_RATE_LIMIT_MAX: '100000',
    LOGIN_ACCOUNT_FAILURES_MAX: '100000',
    TOKEN_FAILURES_MAX: '100000',
    RATE_LIMIT_MAX: '100000'
  })
}

/** How long after `fault` the Sentinels name the replica, and the service works again. */
async function recovery (app: FastifyInstance, set: PrivateSentinelSet, fault: () => unknown): Promise<{ failedOverMs: number, recoveredMs: number }> {
  const startedAt = performance.now()
  let failedOverMs = Infinity
  const failover = waitFor('the Sentinels to name the replica', async () => {
    if (await set.primaryPort() !== set.replica.port) return false
    failedOverMs = performance.now() - startedAt
    return true
  }, RECOVERY_BOUND_MS * 2)
  await fault()
  await waitFor('the service to work again', () => works(app), RECOVERY_BOUND_MS * 2)
  const recoveredMs = performance.now() - startedAt
  await failover
  return { failedOverMs, recoveredMs }
}

t.test('the primary killed: the service follows the Sentinels to the promoted replica by itself, within the bound; a revocation survives; pub/sub and the job queue work there', async (t) => {
  const set = await PrivateSentinelSet.start(t)
  const app = await buildOnSentinels(t, set)
  t.equal(await set.primaryPort(), set.primary.port, 'the Sentinels name the first primary')
  t.ok(await works(app), 'the service serves through the Sentinels')

  const revoked = await login(app)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(revoked) })).statusCode, 204)
  // Replication is asynchronous: a revocation the replica has not received when the primary dies
  // would be lost with it. WAIT makes sure this one was received.
  t.equal(await app.redis.wait(1, 500), 1, 'the revocation reached the replica')
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(revoked) })).statusCode, 401)

  const { failedOverMs, recoveredMs } = await recovery(app, set, () => set.primary.kill())
  t.comment(`killed: the Sentinels failed over in ${Math.round(failedOverMs)} ms; the service worked again ${Math.round(recoveredMs)} ms after the primary was killed`)
  t.ok(recoveredMs < RECOVERY_BOUND_MS, `recovered in ${Math.round(recoveredMs)} ms, within ${RECOVERY_BOUND_MS} ms (down-after ${SENTINEL_DOWN_AFTER_MS} ms, failover-timeout ${SENTINEL_FAILOVER_TIMEOUT_MS} ms)`)
  // The failover detector reconnects once more when the Sentinels announce the switch, which may
  // come after the first reconnection already works: the cache check may fail once more, briefly.
  await waitFor('the cache check ok after the switch', async () => (await app.inject('/health')).json().checks?.cache === 'ok', 5000)
  t.same((await app.inject('/health')).json(), { status: 'ok', checks: { database: 'ok', cache: 'ok' } })

  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(revoked) })).statusCode, 401, 'the revoked token is still refused')

  await worksOnPromoted(t, app, set)
})

t.test('the primary hung (its connections open, unanswered): the Sentinels\' failover announcement moves the service to the promoted replica', async (t) => {
  const set = await PrivateSentinelSet.start(t)
  const app = await buildOnSentinels(t, set)
  t.ok(await works(app), 'the service serves through the Sentinels')

  const { failedOverMs, recoveredMs } = await recovery(app, set, () => set.primary.hang())
  t.comment(`hung: the Sentinels failed over in ${Math.round(failedOverMs)} ms; the service worked again ${Math.round(recoveredMs)} ms after the primary hung`)
  t.ok(recoveredMs < RECOVERY_BOUND_MS, `recovered in ${Math.round(recoveredMs)} ms, within ${RECOVERY_BOUND_MS} ms, with no connection closed by the primary`)
  await worksOnPromoted(t, app, set)
})

t.test('Sentinels that require a password: REDIS_SENTINEL_PASSWORD signs in to them, and the service follows their failover', async (t) => {
  const set = await PrivateSentinelSet.start(t, { password: 'sentinel-secret' })
  const app = await buildOnSentinels(t, set, { REDIS_SENTINEL_PASSWORD: 'sentinel-secret' })
  t.ok(await works(app), 'the service finds the primary through the Sentinels')
  const { recoveredMs } = await recovery(app, set, () => set.primary.kill())
  t.ok(recoveredMs < RECOVERY_BOUND_MS, `the primary killed, recovered in ${Math.round(recoveredMs)} ms, within ${RECOVERY_BOUND_MS} ms`)
})

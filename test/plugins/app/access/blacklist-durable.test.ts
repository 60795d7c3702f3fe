import t, { type Test } from 'tap'
import pg from 'pg'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, ensureTestDatabase, startTestSandbox, tempDir, testKeyPrefix, testSchemaUrl } from '../../../helpers/app.js'
import { PrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { bearer, login } from '../../../helpers/tokens.js'

const jtiOf = (token: string): string => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti

async function status (app: FastifyInstance, token: string): Promise<number> {
  return (await app.inject({ url: '/api/orders', headers: bearer(token) })).statusCode
}

async function logout (app: FastifyInstance, token: string): Promise<number> {
  return (await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode
}

function warnings (logDir: string, text: string): Array<Record<string, unknown>> {
  return readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => Number(line.level) >= 40 && String(line.message).includes(text))
}

/** Instances of one deployment on a redis-server of the test's own: one database schema, one key prefix. */
async function deployment (t: Test, overrides: Record<string, string> = {}) {
  await ensureTestDatabase()
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const sandbox = await startTestSandbox(t)
  const settings = { REDIS_URL: redis.url, REDIS_KEY_PREFIX: testKeyPrefix(), DATABASE_URL: await testSchemaUrl(t), ...overrides }
  const instance = (more: Record<string, string> = {}) => buildTestApp(t, { ...settings, ...more }, sandbox)
  const key = (token: string) => `${settings.REDIS_KEY_PREFIX}auth:blacklist:${jtiOf(token)}`
  return { redis, admin: redis.client(t), settings, instance, key }
}

async function reconnected (...apps: FastifyInstance[]): Promise<void> {
  await waitFor('Redis connections back', async () => apps.every((app) => app.redis.status === 'ready'), 10_000)
}

t.test('Redis restarted empty: a token logged out before stays refused, on this instance and another; the others still pass', async (t) => {
  const { redis, instance, key } = await deployment(t)
  const logDir = tempDir('logs')
  const first = await instance({ LOG_DIR: logDir })
  const second = await instance()
  const revoked = await login(first)
  const kept = await login(first)
  t.equal(await logout(first, revoked), 204)
  t.same([await status(first, revoked), await status(second, revoked)], [401, 401], 'refused everywhere while Redis has it')

  await redis.restartEmpty()
  const admin = redis.client(t)
  t.equal(await admin.exists(key(revoked)), 0, 'Redis came back without the revocation')
  await reconnected(first, second)

  t.equal(await status(first, revoked), 401, 'still refused on the instance that revoked it')
  t.equal(await status(second, revoked), 401, 'and on the other')
  t.same([await status(first, kept), await status(second, kept)], [200, 200], 'a token not logged out passes')
  const ttl = await admin.ttl(key(revoked))
  t.ok(ttl > 0 && ttl <= 900, `put back until the token expires (${ttl} s left)`)
  const said = warnings(logDir, 'Redis holds no revocations')
  t.equal(said.length, 1, 'said once (at start, with nothing to refill, at info)')
  t.match(said[0], { level: 40, revocations: 1 }, 'at warn, with the count')
})

t.test('a Redis that went back in time (failed over to a lagging replica) is noticed and refilled before the check answers', async (t) => {
  const { admin, instance, key, settings } = await deployment(t)
  const app = await instance()
  const [older, newer] = [await login(app), await login(app)]
  t.equal(await logout(app, older), 204)
  t.equal(await logout(app, newer), 204)
  // The replica had the first revocation, not the second, and the epoch of then.
  const epochKey = `${settings.REDIS_KEY_PREFIX}auth:blacklist-epoch`
  const epoch = Number(await admin.get(epochKey))
  await admin.del(key(newer))
  await admin.set(epochKey, String(epoch - 1))

  t.equal(await status(app, newer), 401, 'the revocation the replica lacked is refused')
  t.equal(await admin.exists(key(newer)), 1, 'and back in Redis')
  t.equal(Number(await admin.get(epochKey)), epoch, 'the epoch is where it was')
})

t.test('a token check costs one Redis command, the epoch included', async (t) => {
  const { instance, settings } = await deployment(t)
  const app = await instance()
  const token = await login(app)
  const epochKey = `${settings.REDIS_KEY_PREFIX}auth:blacklist-epoch`
  // The blacklist's own commands, on the app's connection: Redis's own counts also hold the job
  // queue's scripts, which run beside the checks and call EXISTS inside them.
  const sent: Array<{ name: string, args: unknown[] }> = []
  const sendCommand = app.redis.sendCommand.bind(app.redis)
  app.redis.sendCommand = (command, stream) => { sent.push({ name: command.name, args: command.args }); return sendCommand(command, stream) }
  t.teardown(() => { app.redis.sendCommand = sendCommand })
  for (let check = 0; check < 10; check++) t.equal(await status(app, token), 200)
  // An MGET, or with the client's request limit the script that also counts the request (decision 0108).
  const checks = sent.filter(({ args }) => args.includes(epochKey))
  t.equal(checks.length, 10, `one command a check, naming the epoch (${[...new Set(checks.map(({ name }) => name))].join(', ')})`)
  t.notOk(sent.some(({ name }) => name === 'exists'), 'nothing more for the blacklist')
})

t.test('until the refill is done, token checks fail as AUTH_BLACKLIST_FAIL_CLOSED says; then the revoked token is refused', async (t) => {
  for (const failClosed of [true, false]) {
    await t.test(`AUTH_BLACKLIST_FAIL_CLOSED=${failClosed}`, async (t) => {
      const { redis, instance, settings } = await deployment(t, { AUTH_BLACKLIST_FAIL_CLOSED: String(failClosed), REDIS_COMMAND_TIMEOUT_MS: '300' })
      const app = await instance()
      const token = await login(app)
      t.equal(await logout(app, token), 204)
      await redis.restartEmpty()
      await reconnected(app)

      // The refill cannot read the revocations while the table is locked.
      const holder = new pg.Client({ connectionString: settings.DATABASE_URL })
      await holder.connect()
      t.teardown(() => holder.end())
      await holder.query('BEGIN')
      await holder.query('LOCK TABLE revoked_tokens IN ACCESS EXCLUSIVE MODE')
      const during = await app.inject({ url: '/api/orders', headers: bearer(token) })
      if (failClosed) {
        t.equal(during.statusCode, 503, 'fail closed: 503 while Redis is being refilled')
        t.match(during.json(), { code: 'AUTH_UNAVAILABLE' })
      } else {
        t.equal(during.statusCode, 200, 'fail open: let through while Redis is being refilled')
        t.match((await app.inject('/status/summary')).json().blacklist, { mode: 'fail-open', failOpenDecisions: 1 }, 'and counted')
      }
      await holder.query('COMMIT')
      await waitFor('the refill', async () => await status(app, token) === 401, 5000)
      t.pass('refused once the refill is done')
    })
  }
})

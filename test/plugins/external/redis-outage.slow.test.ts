import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import t from 'tap'
import { buildTestApp } from '../../helpers/app.js'
import { PrivateSentinelSet } from '../../helpers/private-sentinel.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'

const OUTAGE_MS = 10_000

interface LogLine { level: number, message: string, [field: string]: unknown }

function logLines (logDir: string, file = 'combined.log'): LogLine[] {
  return readFileSync(join(logDir, file), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as LogLine)
}

t.test('a 10 s outage of the Redis behind Sentinels: no MaxListenersExceededWarning; one error line for the outage and one line at its end, whatever the traffic', async (t) => {
  const warnings: Error[] = []
  const onWarning = (warning: Error) => warnings.push(warning)
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })

  const set = await PrivateSentinelSet.start(t)
  const app = await buildTestApp(t, {
    REDIS_URL: 'redis://unused.invalid:6379',
    REDIS_SENTINELS: set.sentinelsSetting,
    REDIS_SENTINEL_NAME: set.name,
    HEALTH_CHECK_CACHE_MS: '0',
    RATE_LIMIT_MAX: '100000',
    TOKEN_FAILURES_MAX: '100000'
  })
  const token = await login(app)
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode, 200)
  const logDir = app.config.LOG_DIR
  const before = logLines(logDir).length

  // Both Redis servers down: the Sentinels keep naming a primary that refuses every connection.
  await set.replica.stop()
  await set.primary.stop()
  const statuses: number[] = []
  const until = performance.now() + OUTAGE_MS
  while (performance.now() < until) {
    statuses.push((await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode)
    await delay(50)
  }
  await set.primary.start()
  await set.replica.start()
  await waitFor('the service to serve again', async () => (await app.inject({ url: '/api/invoices', headers: bearer(token) })).statusCode === 200, 20_000)

  t.ok(statuses.filter((status) => status === 503).length > 50, `requests were refused during the outage (${statuses.length} sent)`)
  t.same(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning').map(String), [], 'no MaxListenersExceededWarning')

  const during = logLines(logDir).slice(before)
  const refusals = statuses.filter((status) => status === 503).length
  t.same(logLines(logDir, 'error.log').map(({ message }) => message), ['cache connection to Redis failing (reconnecting); further errors are counted until it recovers'], 'error.log: one line for the outage')
  t.match(during.find(({ message }) => message === 'cache connection to Redis recovered'), { level: 30, errors: Number }, 'and one line when it ends, with the failed reconnection attempts')
  const blacklist = during.filter(({ message }) => message.startsWith('token blacklist'))
  t.match(blacklist, [{ level: 40 }, { level: 30, message: 'token blacklist: Redis recovered' }], 'the token blacklist: one line when its checks start failing, one when they pass again')
  t.ok(Number(blacklist[1]?.errors) >= refusals, `with the count of refused checks (${String(blacklist[1]?.errors)}, ${refusals} requests refused)`)
  const completions = during.filter(({ message, statusCode }) => message === 'request completed' && statusCode === 503)
  // The wait for the service to serve again sends a few more.
  t.ok(completions.length >= refusals, 'each refused request has its completion line')
  t.ok(completions.every(({ level }) => level === 40), 'at warn: the outage has its own line')
  t.notOk(during.some(({ message }) => message === 'request failed'), 'no line per request besides its completion')
})

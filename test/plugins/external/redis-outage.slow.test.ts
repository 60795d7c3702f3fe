import { setTimeout as delay } from 'node:timers/promises'
import t from 'tap'
import { buildTestApp } from '../../helpers/app.js'
import { PrivateSentinelSet } from '../../helpers/private-sentinel.js'
import { waitFor } from '../../helpers/processes.js'
import { bearer, login } from '../../helpers/tokens.js'

const OUTAGE_MS = 10_000

t.test('a 10 s outage of the Redis behind Sentinels: no MaxListenersExceededWarning', async (t) => {
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
})

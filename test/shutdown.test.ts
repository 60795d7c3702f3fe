import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { ensureTestDatabase, testEnv } from './helpers/app.js'
import { PrivateRedis } from './helpers/private-redis.js'
import { startService } from './helpers/service-process.js'

t.test('SIGTERM drains in-flight requests, readiness answers 503 meanwhile, exit 0', async (t) => {
  await ensureTestDatabase()
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const service = await startService(testEnv({
    REDIS_URL: redis.url,
    HEALTH_CHECK_TIMEOUT_MS: '1500',
    REDIS_COMMAND_TIMEOUT_MS: '5000',
    SHUTDOWN_DELAY_MS: '1000'
  }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  const before = await request(`${service.url}/health/live`)
  await before.body.dump()
  t.equal(before.headers.connection, 'keep-alive', 'keep-alive before the signal')
  t.equal((await request(`${service.url}/health/ready`)).statusCode, 200, 'ready before the signal')

  // A hung cache makes /health take the whole check timeout: a real slow request to drain.
  await sleep(1000)
  redis.hang()
  const inFlight = request(`${service.url}/health`)
  await sleep(200)
  service.child.kill('SIGTERM')
  await sleep(200)

  const live = await request(`${service.url}/health/live`)
  await live.body.dump()
  t.equal(live.headers.connection, 'close', 'while draining, a keep-alive connection is closed after its answer')
  const ready = await request(`${service.url}/health/ready`, { reset: true })
  t.equal(ready.statusCode, 503, 'readiness fails while draining')
  t.match(await ready.body.json(), { status: 'draining' })

  redis.resume()
  const drained = await inFlight
  t.equal(drained.statusCode, 503, 'the in-flight request completed with its answer')
  t.match(await drained.body.json(), { status: 'degraded', checks: { cache: 'fail' } })

  t.equal(await service.exit, 0, 'the process exits 0')
  t.ok(service.lines.some((line) => line.message === 'shutdown complete'), 'plugins closed in order and the shutdown was logged')
})

import t from 'tap'
import { once } from 'node:events'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { request } from 'undici'
import { SseStreams } from '../plugins/app/sse-streams/index.js'
import { ORDER_PROVISION_CHANNEL } from '../plugins/app/platform-events/subscription.js'
import { ensureTestDatabase, testEnv } from './helpers/app.js'
import { SHARED_REDIS } from './helpers/made.js'
import { PrivateRedis } from './helpers/private-redis.js'
import { waitFor } from './helpers/processes.js'
import { startService } from './helpers/service-process.js'

t.test('SIGTERM drains in-flight requests, readiness answers 503 meanwhile, exit 0', async (t) => {
  await ensureTestDatabase()
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const service = await startService(testEnv({
    REDIS_URL: redis.url,
    HEALTH_CHECK_TIMEOUT_MS: '5000',
    REDIS_COMMAND_TIMEOUT_MS: '10000',
    SHUTDOWN_DELAY_MS: '1000'
  }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  const before = await request(`${service.url}/health/live`)
  await before.body.dump()
  t.equal(before.headers.connection, 'keep-alive', 'keep-alive before the signal')
  t.equal((await request(`${service.url}/health/ready`)).statusCode, 200, 'ready before the signal')

  // A hung cache makes /health take the whole check timeout: a real slow request to drain, once
  // the last run of the checks (readiness's may end after its answer) is reused no more (1 s).
  await sleep(1200)
  redis.hang()
  const inFlight = request(`${service.url}/health`)
  await sleep(200)
  service.child.kill('SIGTERM')
  await sleep(200)

  const live = await request(`${service.url}/health/live`)
  await live.body.dump()
  t.equal(live.headers.connection, 'close', 'while draining, a keep-alive connection is closed after its answer')
  // The in-flight /health waits out the hung cache check (5 s); readiness answers before it.
  const first = await Promise.race([request(`${service.url}/health/ready`, { reset: true }), inFlight.then(() => undefined)])
  if (first === undefined) throw new Error('readiness answered only after the in-flight /health, which waits out the hung cache check')
  const ready = first
  t.equal(ready.statusCode, 503, 'readiness fails while draining, at once, though a check of the cache hangs')
  t.match(await ready.body.json(), { status: 'draining' })

  const drained = await inFlight
  t.equal(drained.statusCode, 503, 'the in-flight request completed with its answer')
  t.match(await drained.body.json(), { status: 'degraded', checks: { cache: 'fail' } })
  redis.resume()

  t.equal(await service.exit, 0, 'the process exits 0')
  t.ok(service.lines.some((line) => line.message === 'shutdown complete'), 'plugins closed in order and the shutdown was logged')
})

t.test('the shutdown line says a second signal exits at once, and it does', async (t) => {
  await ensureTestDatabase()
  const service = await startService(testEnv({ SHUTDOWN_DELAY_MS: '60000' }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  service.child.kill('SIGINT')
  await waitFor('the shutdown line', async () => service.lines.some((line) => String(line.message).startsWith('shutting down')))
  t.match(service.lines.find((line) => String(line.message).startsWith('shutting down')), { delayMs: 60000, message: /a second signal \(Ctrl-C\) exits at once/ })
  service.child.kill('SIGINT')
  t.equal(await service.exit, 1, 'the second signal ends the process, without waiting out the delay')
})

t.test('once the instance closes, its streams end and one asked for after is refused, uncounted', async (t) => {
  const streams = new SseStreams({ perUser: 5, total: 10 })
  const ends: string[] = []
  const stream = (jti: string) => ({ owner: { clientId: 1, jti, exp: Math.floor(Date.now() / 1000) + 60 }, end: (reason: string) => ends.push(reason), heartbeat: () => {} })
  t.equal(streams.open(stream('a')), undefined, 'opened')
  streams.close()
  t.same(ends, ['shutdown'], 'the open stream was ended')
  // Its request passed its checks as the close began: opened now, it would hold the close until its timeout.
  t.equal(streams.open(stream('b')), 'instance_limit', 'refused as by a full instance: 503, retry shortly')
  t.same(streams.counts(), { open: 0, refused: { user_limit: 0, instance_limit: 0 } }, 'not counted as a refusal for capacity')
})

/** An instance holding the platform-event subscription's lease, and a Redis client to watch the lease with. */
async function startHolder (t: { teardown (fn: () => unknown): void }, settings: Record<string, string>) {
  const env = testEnv({ ...settings, CRM_EVENTS_ENABLED: 'true' })
  const service = await startService(env)
  t.teardown(() => { service.child.kill('SIGKILL') })
  const redis = new Redis(SHARED_REDIS)
  t.teardown(() => redis.disconnect())
  const leaseKey = `${env.REDIS_KEY_PREFIX}crm:pe:lease:${ORDER_PROVISION_CHANNEL}`
  await waitFor('the subscription lease', async () => (await redis.get(leaseKey))?.includes(`:${service.child.pid}:`) === true)
  return { service, redis, leaseKey }
}

t.test('a client that never finishes its request holds the shutdown only to the drain bound: exit 0, lease released', async (t) => {
  await ensureTestDatabase()
  // 6 s in all, the last 3 s kept for closing the plugins: connections still open are cut at 3 s.
  const { service, redis, leaseKey } = await startHolder(t, { SHUTDOWN_TIMEOUT_MS: '6000' })

  // Node no longer enforces the receive timeouts once the listener closes: only the bound ends this.
  const socket = connect(Number(new URL(service.url).port), '127.0.0.1')
  socket.on('error', () => {})
  const closed = once(socket, 'close')
  await once(socket, 'connect')
  socket.write('POST /auth/login HTTP/1.1\r\nHost: portal\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"email"')
  await sleep(200)

  service.child.kill('SIGTERM')
  // Past SHUTDOWN_TIMEOUT_MS the process exits 1: exit 0 after the cut is the drain bound's doing.
  t.equal(await service.exit, 0, 'exit 0: before the shutdown timeout')
  await closed
  t.ok(service.lines.some((line) => /drain bound/.test(String(line.message))), 'the connection was cut at the drain bound, and the cut logged')
  t.equal(await redis.get(leaseKey), null, 'the lease was released, not left to expire')
})

t.test('SIGTERM lets the subscription lease go at once, while the instance still serves out its delay', async (t) => {
  await ensureTestDatabase()
  // A lease longer than the wait below: only a release frees it in time, not its expiry.
  const { service, redis, leaseKey } = await startHolder(t, { SHUTDOWN_DELAY_MS: '60000', CRM_EVENTS_LEASE_TTL_MS: '20000' })

  service.child.kill('SIGTERM')
  // Long before the 60 s delay ends, and before the 20 s lease could expire.
  await waitFor('the lease released', async () => await redis.get(leaseKey) === null, 10_000)
  t.equal(service.child.exitCode, null, 'the instance has not exited')
  const live = await request(`${service.url}/health/live`)
  await live.body.dump()
  t.equal(live.statusCode, 200, 'and still serves')
  const queues = await request(`${service.url}/health/queues`)
  t.match(await queues.body.json(), { events: { state: 'standby' } }, 'standing by: it no longer subscribes')
})

import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildTestAppOnPrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { expectLevel } from '../../../helpers/alerts.js'

// Core status and the cache measures, on a private Redis the test may stop, hang and limit.

function privateRedisApp (t: Test) {
  return buildTestAppOnPrivateRedis(t, { HEALTH_CHECK_TIMEOUT_MS: '500' })
}

const read = (app: FastifyInstance, key: string) => app.servicesCache.getOrLoad('client', key, async () => ({ key }))

t.test('core status: a failing check is critical (P1), and ok again once it passes', async (t) => {
  const { redis, app } = await privateRedisApp(t)
  await expectLevel(t, app, 'core_status', 'ok', 'database and cache up')
  await redis.kill()
  await sleep(1000)
  const critical = await expectLevel(t, app, 'core_status', 'critical', 'Redis killed')
  t.match(critical, { value: 1, crossed: 'critical', priority: 'P1' }, 'one failing check')
  t.equal((await app.inject('/health/alerts')).json().level, 'critical', 'the overall level is critical')
  await redis.start()
  await waitFor('the cache check to pass', async () => (await app.inject('/health')).statusCode === 200, 10_000)
  await expectLevel(t, app, 'core_status', 'ok', 'Redis back')
})

t.test('cache hit rate over 5 minutes: < 80 % warns, < 60 % is critical', async (t) => {
  const { app } = await privateRedisApp(t)
  for (let i = 0; i < 5; i++) await read(app, `first-${i}`)
  const early = await expectLevel(t, app, 'cache_hit_rate', 'ok', 'no hit in 5 reads: too few to judge')
  t.match(early, { value: null, note: /too few samples/ })
  for (let i = 0; i < 60; i++) await read(app, 'popular')
  await expectLevel(t, app, 'cache_hit_rate', 'ok', '59 hits of 65 reads')
  for (let i = 0; i < 10; i++) await read(app, `rare-${i}`)
  // The rules open a ticket only under load (300 reads in 5 minutes): fed the same shares five times over.
  await expectLevel(t, app, 'cache_hit_rate', 'warning', '59 hits of 75 reads', { volume: 5 })
  for (let i = 10; i < 35; i++) await read(app, `rare-${i}`)
  await expectLevel(t, app, 'cache_hit_rate', 'critical', '59 hits of 100 reads', { volume: 5 })
  await expectLevel(t, app, 'cache_hit_rate', 'critical', '59 hits of 100 reads, at a quiet portal\'s volume', { level: 'ok' })
})

t.test('cache latency p95: > 10 ms warns, > 50 ms is critical', async (t) => {
  const { redis, app } = await privateRedisApp(t)
  // Enough samples that the cold first commands (a few, on a busy machine) cannot be the 95th percentile.
  for (let i = 0; i < 100; i++) await read(app, `key-${i % 40}`)
  await expectLevel(t, app, 'cache_latency', 'ok', 'Redis answers at once')
  // Reads sent while redis-server is stopped wait for it: their latency is the pause.
  const pausedReads = async (n: number, ms: number) => {
    redis.hang()
    const reads = Array.from({ length: n }, (_, i) => read(app, `key-${i}`))
    await sleep(ms)
    redis.resume()
    await Promise.all(reads)
  }
  await pausedReads(10, 25)
  await expectLevel(t, app, 'cache_latency', 'warning', 'reads held 25 ms', { volume: 5 })
  await pausedReads(20, 100)
  await expectLevel(t, app, 'cache_latency', 'critical', 'reads held 100 ms', { volume: 5 })
})

t.test('cache memory against maxmemory: > 80 % warns, > 95 % is critical; no limit, no judgement', async (t) => {
  const { redis, app } = await privateRedisApp(t)
  const admin = redis.client(t)
  const none = await expectLevel(t, app, 'cache_memory', 'ok', 'no maxmemory')
  t.equal(none.value, null, 'no value without a limit')
  t.match(none.note, /no maxmemory/, 'the row says Redis has no limit')
  t.notMatch((await app.inject('/metrics')).body, /^portal_bff_cache_memory_max_bytes /m, 'and /metrics invents none')

  const setShare = async (share: number) => {
    const used = Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1])
    await admin.config('SET', 'maxmemory', String(Math.round(used / share)))
  }
  await setShare(0.7)
  await expectLevel(t, app, 'cache_memory', 'ok', 'about 70 %')
  await setShare(0.875)
  await expectLevel(t, app, 'cache_memory', 'warning', 'about 87 %')
  await setShare(0.99)
  await expectLevel(t, app, 'cache_memory', 'critical', 'about 99 %: far enough past 95 % that the used memory moving between two reads cannot cross back')
  await admin.config('SET', 'maxmemory', '0')
})

import { Redis } from 'ioredis'
import t from 'tap'
import { DailyUsageStore } from '../../../integrations/crm/daily-usage.js'
import { testKeyPrefix } from '../../helpers/made.js'
import { PrivateRedis } from '../../helpers/private-redis.js'
import { recorder } from '../../helpers/integrations.js'
import { crmDailyUsageKey } from '../../../plugins/app/redis-keys.js'

const redis = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 })
const prefix = testKeyPrefix()
const keys: string[] = []
t.teardown(async () => {
  if (keys.length > 0) await redis.del(...keys)
  await redis.quit()
})

function store (options: { fallbackLimit?: number, client?: Redis } = {}): DailyUsageStore {
  const created = new DailyUsageStore({ redis: options.client ?? redis, key: crmDailyUsageKey(`${prefix}${keys.length}:`), ...options })
  keys.push(created.key)
  return created
}

t.test('before the CRM has reported: the configured limit, or none', async t => {
  t.same(await store().read(), { used: null, limit: null, limitSource: 'unknown', reportedAt: null })
  t.same(await store({ fallbackLimit: 15_000 }).read(), { used: null, limit: 15_000, limitSource: 'configured', reportedAt: null })
})

t.test('the CRM limit replaces the configured one; the key is a hash under the prefix', async t => {
  const usage = store({ fallbackLimit: 15_000 })
  t.equal(usage.key, `${prefix}${keys.length - 1}:crm:daily-usage`)
  usage.record({ used: 120, limit: 100_000 })
  const read = await usage.read()
  t.match(read, { used: 120, limit: 100_000, limitSource: 'crm' })
  t.ok(Math.abs(Date.parse(read.reportedAt ?? '') - Date.now()) < 5000)
  t.match(await redis.hgetall(usage.key), { used: '120', limit: '100000', reportedAt: /^\d+$/ })
})

t.test('the last figure wins, even a lower one: the count is over a rolling 24 hours', async t => {
  const usage = store()
  usage.record({ used: 500, limit: 15_000 })
  usage.record({ used: 480, limit: 15_000 })
  t.match(await usage.read(), { used: 480 })
})

t.test('Redis unreachable: record does not throw, read gives the last figures seen, warned once', async t => {
  const local = recorder()
  const unreachable = new Redis({ port: 1, host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null })
  unreachable.on('error', () => {})
  const usage = new DailyUsageStore({ redis: unreachable, key: crmDailyUsageKey(prefix), fallbackLimit: 15_000, log: local.log })
  t.same(await usage.read(), { used: null, limit: 15_000, limitSource: 'configured', reportedAt: null })
  usage.record({ used: 7, limit: 20_000 })
  usage.record({ used: 8, limit: 20_000 })
  t.match(await usage.read(), { used: 8, limit: 20_000, limitSource: 'crm' })
  t.equal(local.lines.filter(line => line.level === 'warn').length, 1)
  t.match(local.lines[0], { details: { upstream: 'crm', key: usage.key } })
})

t.test('Redis lost after it answered: the figures last read from it', async t => {
  const privateRedis = await PrivateRedis.start()
  t.teardown(() => privateRedis.kill())
  const client = new Redis(privateRedis.url, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null })
  client.on('error', () => {})
  t.teardown(() => client.disconnect())
  await client.connect()
  const writer = new DailyUsageStore({ redis: client, key: crmDailyUsageKey(prefix) })
  const reader = new DailyUsageStore({ redis: client, key: crmDailyUsageKey(prefix) })
  writer.record({ used: 42, limit: 15_000 })
  t.match(await reader.read(), { used: 42, limit: 15_000 }, 'the figure of another instance')
  await privateRedis.kill()
  t.match(await reader.read(), { used: 42, limit: 15_000, limitSource: 'crm' })
})

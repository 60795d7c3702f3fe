import t from 'tap'
import { buildTestApp, startTestSandbox } from '../../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../../helpers/private-redis.js'
import type { FastifyInstance } from 'fastify'

function readInvoice (app: FastifyInstance, invoiceId: number) {
  return app.servicesCache.getOrLoad('invoice', String(invoiceId), () => app.upstreams.billing.queue.run((deadline) => app.upstreams.billing.client.getInvoice(invoiceId, deadline)))
}

function getInvoiceCalls (sandbox: Awaited<ReturnType<typeof startTestSandbox>>): number {
  return sandbox.billing.calls.filter((call) => call.params?.action === 'GetInvoice').length
}

t.test('the second read is a hit, and the report says so', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  const invoiceId = sandbox.billing.invoices[0]!.id

  const first = await readInvoice(app, invoiceId)
  const second = await readInvoice(app, invoiceId)
  t.same(second, first, 'the same invoice')
  t.equal(getInvoiceCalls(sandbox), 1, 'the upstream was read once')
  const secondsLeft = await app.redis.ttl(`${app.config.REDIS_KEY_PREFIX}services-cache:invoice:${invoiceId}`)
  t.ok(secondsLeft > 0 && secondsLeft <= 300, `the entry expires with the invoice TTL (${secondsLeft} s left)`)

  const report = (await app.inject('/api/health/services/cache')).json()
  t.match(report, { status: 'ok', hits: 1, misses: 1, errors: 0, hitRate: 50 })
  t.ok(report.latency.averageMs >= 0 && report.latency.p95Ms >= 0, 'latency is measured')
  t.ok(report.memory.usedBytes > 0, 'memory used is read from Redis')
  t.ok(report.memory.maxBytes === null ? report.memory.percent === null : report.memory.percent >= 0, 'no limit, no percent')
  t.ok(Number.isInteger(report.keys) && report.keys >= 1)
  t.match(report.ttlSeconds, { invoice: 300, invoices: 60, client: 300 })
})

t.test('with the cache Redis stopped, reads still succeed from the upstream', async (t) => {
  const sandbox = await startTestSandbox(t)
  const { redis, app } = await buildTestAppOnPrivateRedis(t, {}, sandbox)
  const invoiceId = sandbox.billing.invoices[0]!.id
  await readInvoice(app, invoiceId)

  await redis.kill()
  const invoice = await readInvoice(app, invoiceId)
  t.equal(invoice?.id, invoiceId, 'the invoice still arrives')
  t.equal(getInvoiceCalls(sandbox), 2, 'from the upstream')
  const report = (await app.inject('/api/health/services/cache')).json()
  t.match(report, { status: 'fail', misses: 2, memory: { usedBytes: null }, keys: null })
  t.ok(report.errors >= 1, 'the cache failure is counted')
})

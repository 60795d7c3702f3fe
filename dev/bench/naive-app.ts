import Fastify from 'fastify'
import { Redis } from 'ioredis'
import pg from 'pg'

// The other baseline: /health's JSON from a check of PostgreSQL and Redis on every request,
// nothing shared between concurrent callers and nothing reused.

// As many connections as the service's pool has by default (DATABASE_POOL_MAX).
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
const status = (result: PromiseSettledResult<unknown>) => result.status === 'fulfilled' ? 'ok' : 'fail'

const app = Fastify({ logger: false })
app.get('/health', async (_request, reply) => {
  const [database, cache] = await Promise.allSettled([pool.query('SELECT 1'), redis.ping()])
  const checks = { database: status(database), cache: status(cache) }
  const ok = checks.database === 'ok' && checks.cache === 'ok'
  return reply.code(ok ? 200 : 503).send({ status: ok ? 'ok' : 'degraded', checks })
})
app.addHook('onClose', async () => {
  redis.disconnect()
  await pool.end()
})
const address = await app.listen({ port: 0, host: '127.0.0.1' })
process.stdout.write(`${JSON.stringify({ message: `Server listening at ${address}` })}\n`)
process.on('SIGTERM', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })

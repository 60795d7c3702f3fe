import Fastify from 'fastify'
import fastifyJwt from '@fastify/jwt'
import { Redis } from 'ioredis'

// The baseline of the cached-read suite: a bare Fastify route that does what a cache hit of
// GET /api/invoices needs and no more. It checks the token as the service does (HS256 signature,
// then the blacklist key in Redis), reads the services cache's key, and answers the same body.
// Logger off, as the minimal app of the health suite; no schemas, hooks or rate limit.
const { JWT_SECRET, REDIS_URL, REDIS_KEY_PREFIX } = process.env
if (JWT_SECRET === undefined || REDIS_URL === undefined || REDIS_KEY_PREFIX === undefined) {
  throw new Error('JWT_SECRET, REDIS_URL and REDIS_KEY_PREFIX are required')
}

const redis = new Redis(REDIS_URL)
const app = Fastify({ logger: false })
await app.register(fastifyJwt, { secret: JWT_SECRET, verify: { algorithms: ['HS256'] } })

app.get('/api/invoices', async (request, reply) => {
  try {
    await request.jwtVerify()
  } catch {
    return reply.code(401).send({ code: 'UNAUTHORIZED' })
  }
  const { sub, jti } = request.user
  if (await redis.exists(`${REDIS_KEY_PREFIX}auth:blacklist:${jti}`) === 1) return reply.code(401).send({ code: 'UNAUTHORIZED' })
  const query = request.query as { page?: string, limit?: string }
  const page = Number(query.page ?? 1)
  const limit = Number(query.limit ?? 25)
  const cached = await redis.get(`${REDIS_KEY_PREFIX}services-cache:invoices:${sub}:any:${page}:${limit}`)
  // The suite fills the key before every round: a miss here is the suite's error, not a load to do.
  if (cached === null) return reply.code(500).send({ code: 'NOT_CACHED' })
  const { invoices, total } = JSON.parse(cached) as { invoices: Array<{ clientId?: number }>, total: number }
  // The service's response schema leaves the cached invoices' clientId out: the same body, byte for byte.
  return { invoices: invoices.map(({ clientId, ...invoice }) => invoice), page, limit, total }
})

const address = await app.listen({ port: 0, host: '127.0.0.1' })
process.stdout.write(`${JSON.stringify({ message: `Server listening at ${address}` })}\n`)
process.on('SIGTERM', () => {
  redis.disconnect()
  app.close().then(() => process.exit(0), () => process.exit(1))
})

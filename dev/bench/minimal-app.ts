import Fastify from 'fastify'

// The baseline: Fastify with the logger off, answering /health's JSON without checking anything.
const app = Fastify({ logger: false })
const body = { status: 'ok', checks: { database: 'ok', cache: 'ok' } }
app.get('/health', async () => body)
const address = await app.listen({ port: 0, host: '127.0.0.1' })
process.stdout.write(`${JSON.stringify({ message: `Server listening at ${address}` })}\n`)
process.on('SIGTERM', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })

import { createServer, type ServerResponse } from 'node:http'
import { Redis } from 'ioredis'

// The baseline of the streams suite: node:http and one Redis subscriber, fanning the order status
// channel out to every stream of the client named in the message, in the service's frames. No
// token check (the client id is the token's `sub`, read unverified), no limits, no backlog.
const channel = process.env.CHANNEL
const redisUrl = process.env.REDIS_URL
if (channel === undefined || redisUrl === undefined) throw new Error('CHANNEL and REDIS_URL are required')

const HEARTBEAT_MS = 15_000
const listeners = new Map<number, Set<ServerResponse>>()

interface Announcement { clientId: number, event: { id: string } & Record<string, unknown> }

function subjectOf (authorization: string | undefined): number | undefined {
  const payload = authorization?.startsWith('Bearer ') === true ? authorization.slice(7).split('.')[1] : undefined
  if (payload === undefined) return undefined
  try {
    const sub = Number((JSON.parse(Buffer.from(payload, 'base64url').toString()) as { sub?: unknown }).sub)
    return Number.isInteger(sub) ? sub : undefined
  } catch {
    return undefined
  }
}

const subscriber = new Redis(redisUrl)
subscriber.on('message', (from: string, message: string) => {
  if (from !== channel) return
  const { clientId, event } = JSON.parse(message) as Announcement
  const { id, ...data } = event
  const frame = `id: ${id}\nevent: order.status\ndata: ${JSON.stringify(data)}\n\n`
  for (const response of listeners.get(clientId) ?? []) response.write(frame)
})
await subscriber.subscribe(channel)

const server = createServer((request, response) => {
  const clientId = subjectOf(request.headers.authorization)
  if (request.method !== 'GET' || request.url !== '/api/events' || clientId === undefined) {
    response.writeHead(request.url === '/api/events' ? 401 : 404).end()
    return
  }
  const streams = listeners.get(clientId) ?? new Set()
  streams.add(response)
  listeners.set(clientId, streams)
  const heartbeat = setInterval(() => response.write(': heartbeat\n\n'), HEARTBEAT_MS)
  request.on('close', () => {
    clearInterval(heartbeat)
    streams.delete(response)
    if (streams.size === 0) listeners.delete(clientId)
  })
  response.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no'
  })
  response.write('retry: 3000\n\n')
})

server.listen(0, '127.0.0.1', () => {
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  process.stdout.write(`${JSON.stringify({ message: `Server listening at http://127.0.0.1:${port}` })}\n`)
})
process.on('SIGTERM', () => {
  server.closeAllConnections()
  server.close()
  subscriber.disconnect()
  process.exit(0)
})

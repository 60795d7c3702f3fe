import { createConnection, createServer, type Server, type Socket } from 'node:net'

/**
 * A TCP proxy in front of PostgreSQL that counts the queries clients send: simple-query ('Q')
 * and extended-protocol execute ('E') messages, read off the wire protocol itself.
 */
export class PgCountingProxy {
  queries = 0
  readonly #sockets = new Set<Socket>()
  private constructor (private readonly server: Server, readonly port: number) {}

  static async start (targetPort: number): Promise<PgCountingProxy> {
    const server = createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const address = server.address()
    if (typeof address !== 'object' || address === null) throw new Error('proxy has no address')
    const proxy = new PgCountingProxy(server, address.port)
    server.on('connection', (client) => proxy.relay(client, targetPort))
    return proxy
  }

  url (database: string): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${database}`
  }

  relay (client: Socket, targetPort: number): void {
    const upstream = createConnection(targetPort, '127.0.0.1')
    for (const socket of [client, upstream]) {
      this.#sockets.add(socket)
      socket.on('close', () => this.#sockets.delete(socket))
      socket.on('error', () => { client.destroy(); upstream.destroy() })
    }
    upstream.pipe(client)
    let pending = Buffer.alloc(0)
    let startupDone = false
    client.on('data', (chunk: Buffer) => {
      upstream.write(chunk)
      pending = Buffer.concat([pending, chunk])
      for (;;) {
        // The startup message has no type byte; every later message does.
        const header = startupDone ? 5 : 4
        if (pending.length < header) break
        const length = pending.readInt32BE(startupDone ? 1 : 0) + (startupDone ? 1 : 0)
        if (pending.length < length) break
        const type = String.fromCharCode(pending[0] ?? 0)
        if (startupDone && (type === 'Q' || type === 'E')) this.queries++
        startupDone = true
        pending = pending.subarray(length)
      }
    })
  }

  async close (): Promise<void> {
    for (const socket of this.#sockets) socket.destroy()
    await new Promise((resolve) => this.server.close(resolve))
  }
}

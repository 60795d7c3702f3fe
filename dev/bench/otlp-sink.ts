import { createServer } from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'

export interface OtlpSink {
  url: string
  /** Export requests received, and their bytes. */
  received (): { exports: number, bytes: number }
  close (): Promise<void>
}

/** An OTLP/HTTP collector that takes every export and keeps nothing: what a service's tracing costs it, not the collector. */
export async function startOtlpSink (): Promise<OtlpSink> {
  let exports = 0
  let bytes = 0
  const server = createServer((request, response) => {
    request.on('data', (chunk: Buffer) => { bytes += chunk.length })
    request.on('end', () => {
      exports++
      response.writeHead(200, { 'content-type': request.headers['content-type'] ?? 'application/x-protobuf' }).end()
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received: () => ({ exports, bytes }),
    async close () {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  }
}

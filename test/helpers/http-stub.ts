import { createServer, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

export interface StubAnswer {
  status: number
  headers?: OutgoingHttpHeaders
  body?: string
}

/**
 * An upstream that answers as a test needs it to, past what the sandbox does: every request, once
 * its body has arrived, gets `answer`'s answer. Closed when the test ends; resolves with its base URL.
 */
export async function stubServer (t: Test, answer: (request: IncomingMessage, body: string, baseUrl: string) => StubAnswer): Promise<string> {
  let baseUrl = ''
  const server = createServer((request, response) => {
    let body = ''
    request.on('data', (chunk: Buffer) => { body += chunk.toString() })
    request.on('end', () => {
      try {
        const { status, headers = {}, body: text } = answer(request, body, baseUrl)
        response.writeHead(status, headers).end(text)
      } catch (error) {
        // The test sees a failed call rather than its whole process ending.
        t.fail(`the stub's answer threw: ${String(error)}`)
        response.writeHead(500).end()
      }
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise(resolve => server.close(resolve))
  })
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return baseUrl
}

/** A JSON answer. */
export function json (status: number, value: unknown, headers: OutgoingHttpHeaders = {}): StubAnswer {
  return { status, headers: { 'content-type': 'application/json', ...headers }, body: typeof value === 'string' ? value : JSON.stringify(value) }
}

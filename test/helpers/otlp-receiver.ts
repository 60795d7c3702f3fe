import { createServer, type Server } from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { waitFor } from './processes.js'
import { startTracing } from '../../lib/tracing-start.js'

type AttributeValue = string | number | boolean | undefined

/** One span as the service exported it, its attributes flattened. */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string | undefined
  name: string
  kind: number
  attributes: Record<string, AttributeValue>
  links: Array<{ traceId: string, spanId: string }>
  status: { code?: number, message?: string }
  /** Its events' names (`exception`). */
  events: string[]
  resource: Record<string, AttributeValue>
}

interface OtlpValue { stringValue?: string, intValue?: string | number, boolValue?: boolean, doubleValue?: number }
interface OtlpAttribute { key: string, value: OtlpValue }
interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes?: OtlpAttribute[]
  links?: Array<{ traceId: string, spanId: string }>
  status?: { code?: number, message?: string }
  events?: Array<{ name: string }>
}
interface OtlpExport { resourceSpans?: Array<{ resource?: { attributes?: OtlpAttribute[] }, scopeSpans?: Array<{ spans?: OtlpSpan[] }> }> }

function valueOf ({ stringValue, intValue, boolValue, doubleValue }: OtlpValue): AttributeValue {
  if (intValue !== undefined) return Number(intValue)
  return stringValue ?? boolValue ?? doubleValue
}

function attributesOf (attributes: OtlpAttribute[] = []): Record<string, AttributeValue> {
  return Object.fromEntries(attributes.map(({ key, value }) => [key, valueOf(value)]))
}

/**
 * An OTLP/HTTP collector for a test: it takes `POST /v1/traces` in JSON (the service set to
 * OTEL_EXPORTER_OTLP_PROTOCOL=http/json) and keeps every span it is sent.
 */
export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = []
  exports = 0

  private constructor (private readonly server: Server, readonly url: string) {}

  static async start (): Promise<OtlpReceiver> {
    const server = createServer()
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    const receiver = new OtlpReceiver(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`)
    server.on('request', (request, response) => {
      const chunks: Buffer[] = []
      request.on('data', (chunk: Buffer) => chunks.push(chunk))
      request.on('end', () => {
        if (request.method === 'POST' && request.url === '/v1/traces') receiver.#take(JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport)
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      })
    })
    return receiver
  }

  #take (body: OtlpExport): void {
    this.exports++
    for (const { resource, scopeSpans = [] } of body.resourceSpans ?? []) {
      for (const { spans = [] } of scopeSpans) {
        for (const span of spans) {
          this.spans.push({
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: span.parentSpanId === '' ? undefined : span.parentSpanId,
            name: span.name,
            kind: span.kind,
            attributes: attributesOf(span.attributes),
            links: (span.links ?? []).map(({ traceId, spanId }) => ({ traceId, spanId })),
            status: span.status ?? {},
            events: (span.events ?? []).map(({ name }) => name),
            resource: attributesOf(resource?.attributes)
          })
        }
      }
    }
  }

  /** The first span `match` accepts, once it has arrived. */
  async span (what: string, match: (span: ReceivedSpan) => boolean, timeoutMs = 10_000): Promise<ReceivedSpan> {
    await waitFor(what, async () => this.spans.some(match), timeoutMs)
    return this.spans.find(match)!
  }

  children (parent: ReceivedSpan): ReceivedSpan[] {
    return this.spans.filter((span) => span.traceId === parent.traceId && span.parentSpanId === parent.spanId)
  }

  async close (): Promise<void> {
    this.server.closeAllConnections()
    await new Promise((resolve) => this.server.close(resolve))
  }
}

/**
 * OpenTelemetry's SDK for this test process (it is process-wide: one per test file), exporting in
 * JSON every 50 ms to a receiver of its own, both ended when the file's tests are.
 */
export async function traceThisProcess (t: { teardown (fn: () => unknown): void }): Promise<OtlpReceiver> {
  const receiver = await OtlpReceiver.start()
  Object.assign(process.env, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' })
  const tracing = (await startTracing(process.env, 'portal-bff'))!
  t.teardown(async () => {
    await tracing.shutdown(2000)
    await receiver.close()
  })
  return receiver
}

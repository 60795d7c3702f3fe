import t from 'tap'
import { createServer, type Socket } from 'node:net'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { ensureTestDatabase, testEnv } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'
import { startService, type ServiceProcess } from '../helpers/service-process.js'

const SHUTDOWN_TIMEOUT_MS = 10_000

/** A TCP server that takes connections and never answers: a collector hung rather than gone. */
async function hungCollector (t: { teardown (fn: () => unknown): void }): Promise<string> {
  const sockets: Socket[] = []
  const server = createServer((socket) => { sockets.push(socket) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    server.close()
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** A port nothing listens on: a collector that is down. */
async function downCollector (): Promise<string> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return `http://127.0.0.1:${port}`
}

const OUTAGE = /^trace exporter: the OTLP collector failing/

async function signIn (service: ServiceProcess): Promise<string> {
  const response = await fetch(`${service.url}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  return ((await response.json()) as { accessToken: string }).accessToken
}

for (const [state, collector] of [['down', downCollector], ['hung', hungCollector]] as const) {
  t.test(`the collector ${state}: requests, /health and SIGTERM are unaffected, and the log says so once, naming no request's trace`, async (t) => {
    await ensureTestDatabase()
    const service = await startService(testEnv({
      OTEL_EXPORTER_OTLP_ENDPOINT: await collector(t),
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_TIMEOUT: '1000',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_TRACES_SAMPLER: 'sometimes',
      OTEL_LOG_LEVEL: 'error',
      SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS)
    }))
    t.teardown(() => { service.child.kill('SIGKILL') })
    const token = await signIn(service)
    const outages = () => service.lines.filter((line) => OUTAGE.test(String(line.message)))
    for (let round = 0; round < 10 && outages().length === 0; round++) {
      const invoices = await fetch(`${service.url}/api/invoices`, { headers: { authorization: `Bearer ${token}` } })
      t.equal(invoices.status, 200, 'a portal read is answered')
      t.equal((await fetch(`${service.url}/health`)).status, 200, '/health is answered')
      await new Promise((resolve) => setTimeout(resolve, 300))
    }
    await waitFor('the outage warning', async () => outages().length > 0, 10_000)
    // More spans, more failed exports: still the one line.
    for (let round = 0; round < 5; round++) {
      t.equal((await fetch(`${service.url}/api/invoices`, { headers: { authorization: `Bearer ${token}` } })).status, 200)
      await new Promise((resolve) => setTimeout(resolve, 300))
    }
    t.equal(outages().length, 1, 'one warning for the outage')
    t.match(outages()[0], { level: 40, correlationId: 'system' })
    t.equal(outages()[0]?.traceId, undefined, 'the SDK\'s line names no request\'s trace')
    t.equal(outages()[0]?.spanId, undefined)
    t.ok(service.lines.some((line) => line.level === 40 && /^OTEL_TRACES_SAMPLER: "sometimes" is not one of/.test(String(line.message))), 'an invalid OTEL_* setting warns at start')
    const diagnostics = service.lines.filter((line) => String(line.message).startsWith('OpenTelemetry: '))
    t.ok(diagnostics.some((line) => /OTEL_TRACES_SAMPLER value "sometimes" invalid/.test(String(line.message))), 'OTEL_LOG_LEVEL: the SDK\'s diagnostics are log lines')
    t.same(diagnostics.filter((line) => line.traceId !== undefined || line.correlationId !== 'system'), [], 'none of them names a request')

    const signalled = performance.now()
    service.child.kill('SIGTERM')
    t.equal(await service.exit, 0, 'SIGTERM exits 0')
    t.ok(performance.now() - signalled < SHUTDOWN_TIMEOUT_MS, 'within the drain')
  })
}

import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox } from '../helpers/app.js'
import { traceThisProcess } from '../helpers/otlp-receiver.js'
import { waitFor } from '../helpers/processes.js'
import { SseClient } from '../helpers/sse.js'
import { bearer, login } from '../helpers/tokens.js'
import type { Sandbox } from '../../dev/sandbox/index.js'

const receiver = await traceThisProcess(t)

interface LogLine { correlationId?: string, traceId?: string, spanId?: string, message?: string, path?: string }

function logLines (logDir: string): LogLine[] {
  return readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as LogLine)
}

/** An app with a sandbox of its own, Jane signed in, and the sandbox billing's record of calls emptied. */
async function signedIn (t: Test, overrides: (sandbox: Sandbox) => Record<string, string> = () => ({})) {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, overrides(sandbox), sandbox)
  const token = await login(app)
  await fetch(`${sandbox.billing.url}/__sandbox/calls`, { method: 'DELETE' })
  return { sandbox, app, token }
}

/** The traceparent of the GetInvoices call the sandbox billing received. */
async function sentTraceparent (sandbox: Sandbox): Promise<string | undefined> {
  const { calls } = await (await fetch(`${sandbox.billing.url}/__sandbox/calls`)).json() as { calls: Array<{ params?: Record<string, unknown>, headers?: Record<string, string> }> }
  return calls.find((recorded) => recorded.params?.action === 'GetInvoices')?.headers?.traceparent
}

t.test('a GET /api/invoices missing the cache is one trace: the request, its queue wait, its billing call with its HTTP request (whose traceparent it sent) and its Redis commands', async (t) => {
  // Credentials in the URL (a proxy's, say) and a query never reach a span.
  const { sandbox, app, token } = await signedIn(t, (sandbox) => ({ BILLING_API_URL: sandbox.billing.apiUrl.replace('http://', 'http://proxy-user:proxy-secret@') + '?account=jane' }))
  const correlationId = 'trace-invoices-1'
  const response = await app.inject({ url: '/api/invoices', headers: { ...bearer(token), 'x-correlation-id': correlationId } })
  t.equal(response.statusCode, 200)

  const request = await receiver.span('the request span', (span) => span.attributes['correlation.id'] === correlationId)
  t.equal(request.name, 'GET /api/invoices')
  t.match(request.attributes, { 'http.route': '/api/invoices', 'http.response.status_code': 200 })
  t.match(request.resource, { 'service.name': 'portal-bff', 'service.instance.id': /^[0-9a-f-]{36}$/, 'host.name': hostname(), 'process.pid': process.pid, 'process.runtime.name': 'nodejs' },
    'the resource names the instance, its host and process (every detector by default)')
  const billing = await receiver.span('the billing call', (span) => span.traceId === request.traceId && span.name === 'billing GetInvoices')
  const children = () => receiver.children(request).map((span) => span.name)
  await waitFor('the queue wait', async () => children().includes('billing queue wait'))
  t.equal(billing.parentSpanId, request.spanId, 'the billing call is a child of the request')
  t.match(billing.attributes, { 'upstream.name': 'billing', 'upstream.operation': 'GetInvoices' })
  t.notOk(Object.keys(billing.attributes).some((key) => /client|email|secret|identifier|password/i.test(key)), 'no credential or personal field')
  const http = await receiver.span('the billing call\'s HTTP request', (span) => span.parentSpanId === billing.spanId && span.name === 'POST')
  const { port, pathname } = new URL(sandbox.billing.apiUrl)
  t.same(http.kind, 3, 'an HTTP client span')
  t.same(billing.kind, 1, 'under the call\'s internal span: one client span a request')
  t.match(http.attributes, {
    'http.request.method': 'POST',
    'url.full': `http://127.0.0.1:${port}${pathname}?account=REDACTED`,
    'server.address': '127.0.0.1',
    'server.port': Number(port),
    'http.response.status_code': 200
  })
  t.ok(children().includes('redis GET'), 'the cache read')
  await waitFor('the cache write', async () => children().includes('redis SET'))
  const redis = receiver.children(request).find((span) => span.name === 'redis SET')!
  t.equal(redis.attributes['db.query.text'], 'SET ? ? ? ?', 'keys and values elided')

  t.equal(await sentTraceparent(sandbox), `00-${request.traceId}-${http.spanId}-01`, 'the traceparent sent is the HTTP request span\'s')

  await app.close()
  const lines = logLines(app.config.LOG_DIR).filter((line) => line.correlationId === correlationId)
  t.ok(lines.length > 0, 'the request logged')
  t.ok(lines.every((line) => line.traceId === request.traceId && typeof line.spanId === 'string'), 'each of its lines carries the trace id beside the correlation id')
})

t.test('an incoming traceparent is the request span\'s parent', async (t) => {
  const app = await buildTestApp(t)
  const [traceId, parentId] = ['4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7']
  await app.inject({ url: '/api/invoices', headers: { traceparent: `00-${traceId}-${parentId}-01`, 'x-correlation-id': 'trace-parent-1' } })
  const request = await receiver.span('the request span', (span) => span.attributes['correlation.id'] === 'trace-parent-1')
  t.equal(request.traceId, traceId)
  t.equal(request.parentSpanId, parentId)
})

t.test('an incoming tracestate and baggage reach the upstream with the billing call\'s traceparent', async (t) => {
  const { sandbox, app, token } = await signedIn(t)
  const traceId = '6bf92f3577b34da6a3ce929d0e0e4738'
  const headers = { ...bearer(token), traceparent: `00-${traceId}-00f067aa0ba902b7-01`, tracestate: 'vendor=opaque-1', baggage: 'tenant=portal,region=eu', 'x-correlation-id': 'trace-state-1' }
  t.equal((await app.inject({ url: '/api/invoices', headers })).statusCode, 200)
  const { calls } = await (await fetch(`${sandbox.billing.url}/__sandbox/calls`)).json() as { calls: Array<{ params?: Record<string, unknown>, headers?: Record<string, string> }> }
  const sent = calls.find((recorded) => recorded.params?.action === 'GetInvoices')?.headers ?? {}
  const http = await receiver.span('the billing call\'s HTTP request', (span) => span.traceId === traceId && span.name === 'POST')
  t.equal(sent.traceparent, `00-${traceId}-${http.spanId}-01`)
  t.equal(sent.tracestate, 'vendor=opaque-1')
  t.same(sent.baggage?.split(',').map((entry) => entry.trim()).sort(), ['region=eu', 'tenant=portal'])
  t.equal(sent['x-correlation-id'], 'trace-state-1', 'beside the correlation id')
})

t.test('a trace the caller did not sample: no span is made, the upstream is told so in the traceparent, and the log lines name no trace', async (t) => {
  const { sandbox, app, token } = await signedIn(t)
  const traceId = '5bf92f3577b34da6a3ce929d0e0e4737'
  const correlationId = 'trace-unsampled-1'
  t.equal((await app.inject({ url: '/api/invoices', headers: { ...bearer(token), traceparent: `00-${traceId}-00f067aa0ba902b7-00`, 'x-correlation-id': correlationId } })).statusCode, 200)
  const sent = await sentTraceparent(sandbox)
  t.match(sent, new RegExp(`^00-${traceId}-[0-9a-f]{16}-00$`), 'the caller\'s trace, not sampled')
  // A traced request after it: once its span is in, any of the unsampled one's would be too.
  await app.inject({ url: '/api/invoices', headers: { 'x-correlation-id': 'trace-after-unsampled' } })
  await receiver.span('the request after', (span) => span.attributes['correlation.id'] === 'trace-after-unsampled')
  t.notOk(receiver.spans.some((span) => span.traceId === traceId), 'no span of the unsampled trace')

  await app.close()
  const lines = logLines(app.config.LOG_DIR).filter((line) => line.correlationId === correlationId)
  t.ok(lines.length > 0, 'the unsampled request logged')
  t.ok(lines.every((line) => line.traceId === undefined && line.spanId === undefined), 'no trace id no backend holds')
})

t.test('a 4xx answer is not a span error; a 5xx is', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, {}, sandbox)
  t.equal((await app.inject({ url: '/api/invoices', headers: { 'x-correlation-id': 'trace-401' } })).statusCode, 401)
  const refused = await receiver.span('the refused request', (span) => span.attributes['correlation.id'] === 'trace-401')
  t.equal(refused.attributes['http.response.status_code'], 401)
  t.equal(refused.status.code ?? 0, 0, 'status unset: the client\'s mistake, not the server\'s failure')
  const token = await login(app)
  sandbox.billing.injectFault({ kind: 'http5xx', status: 500 })
  t.equal((await app.inject({ url: '/api/invoices', headers: { ...bearer(token), 'x-correlation-id': 'trace-503' } })).statusCode, 503)
  const failed = await receiver.span('the failed request', (span) => span.attributes['correlation.id'] === 'trace-503')
  t.equal(failed.status.code, 2, 'error')
  t.equal(failed.status.message, 'BILLING_UNAVAILABLE', 'described by the code the caller was given')
  t.equal(failed.attributes['error.type'], 'BILLING_UNAVAILABLE')
  t.equal(refused.attributes['error.type'], undefined, 'a 4xx has no error.type')
})

t.test('a 5xx\'s span names its failure by the error\'s code or class, never by its message, which may hold anything', async (t) => {
  const app = await buildTestApp(t, {}, undefined, {
    pages: async (pages) => {
      pages.get('/test/crash', async () => { throw new Error('connect to db.internal:5432 with password=hunter2 failed') })
      pages.get('/test/refused', async () => { throw Object.assign(new Error('upstream said: client 4711 is jane@example.com'), { code: 'ECONNREFUSED' }) })
    }
  })
  t.equal((await app.inject({ url: '/test/crash', headers: { 'x-correlation-id': 'trace-crash' } })).statusCode, 500)
  t.equal((await app.inject({ url: '/test/refused', headers: { 'x-correlation-id': 'trace-refused' } })).statusCode, 500)
  const crash = await receiver.span('the crashed request', (span) => span.attributes['correlation.id'] === 'trace-crash')
  const refused = await receiver.span('the refused request', (span) => span.attributes['correlation.id'] === 'trace-refused')
  t.match(crash, { status: { code: 2, message: 'Error' }, attributes: { 'error.type': 'Error' } }, 'a plain error: its class')
  t.match(refused, { status: { code: 2, message: 'ECONNREFUSED' }, attributes: { 'error.type': 'ECONNREFUSED' } }, 'an error with a code: the code')
  for (const span of [crash, refused]) {
    t.same(span.events, [], 'no exception event: its message and stack are in the request\'s log line')
    t.notMatch(JSON.stringify(span), /hunter2|db\.internal|jane@|4711/, 'nothing of the message anywhere in the span')
  }
})

t.test('an event stream\'s completion line, written when a logout ends it, names the stream request\'s trace', async (t) => {
  const app = await buildTestApp(t)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const token = await login(app)
  const stream = await SseClient.open(`${url}/api/events`, { ...bearer(token), 'x-correlation-id': 'trace-stream-1' })
  t.equal(stream.status, 200)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 204)
  await waitFor('the stream ended', async () => stream.ended)
  await app.close()
  // The request span ends with the stream.
  const request = await receiver.span('the stream\'s request span', (span) => span.attributes['correlation.id'] === 'trace-stream-1')
  const completion = logLines(app.config.LOG_DIR).find((line) => line.message === 'request completed' && line.path === '/api/events')
  t.match(completion, { correlationId: 'trace-stream-1', traceId: request.traceId, spanId: request.spanId })
})

/** The request-duration buckets of `route`'s 4xx answers that carry an exemplar, in an OpenMetrics exposition. */
function exemplarsOf (text: string, route: string): string[] {
  return text.split('\n').filter((line) => line.startsWith('portal_bff_http_request_duration_seconds_bucket{') && line.includes(`route="${route}"`) &&
    line.includes('status_class="4xx"') && line.includes(' # {'))
}

t.test('/metrics in OpenMetrics gives a sampled request\'s trace as the exemplar of its duration\'s bucket; a request the sampler left out gives none', async (t) => {
  const app = await buildTestApp(t)
  const openMetrics = async () => (await app.inject({ url: '/metrics', headers: { accept: 'application/openmetrics-text' } })).body
  t.equal((await app.inject({ url: '/api/invoices', headers: { traceparent: '00-7bf92f3577b34da6a3ce929d0e0e4739-00f067aa0ba902b7-00' } })).statusCode, 401)
  t.same(exemplarsOf(await openMetrics(), '/api/invoices'), [], 'none of a trace nobody keeps')

  t.equal((await app.inject({ url: '/api/invoices', headers: { 'x-correlation-id': 'trace-exemplar-1' } })).statusCode, 401)
  const request = await receiver.span('the request span', (span) => span.attributes['correlation.id'] === 'trace-exemplar-1')
  const [exemplar, ...others] = exemplarsOf(await openMetrics(), '/api/invoices')
  t.same(others, [], 'one bucket: the request\'s')
  // Buckets count cumulatively: the sampled request's holds the other too when that one was quicker.
  t.match(exemplar, new RegExp(`^\\S+\\{[^}]*\\} [12] # \\{trace_id="${request.traceId}",span_id="${request.spanId}"\\} [0-9.e-]+ [0-9.]+$`),
    'the sampled request\'s bucket, its exemplar that request\'s trace, with its value and time')
  t.notMatch((await app.inject('/metrics')).body, / # \{/, 'Prometheus text has no exemplars')
})

const PROBES = ['/health', '/health/live', '/health/ready', '/health/queues', '/metrics', '/status', '/status/summary']

function probeSpans () {
  return receiver.spans.filter((span) => /^\/(health|metrics|status)/.test(String(span.attributes['http.route'])))
}

t.test('the probes produce no spans by default', async (t) => {
  const app = await buildTestApp(t)
  const before = probeSpans().length
  for (const url of PROBES) await app.inject(url)
  // A traced request after them: once its span is in, theirs would be too.
  await app.inject({ url: '/api/invoices', headers: { 'x-correlation-id': 'trace-after-probes' } })
  await receiver.span('the request after the probes', (span) => span.attributes['correlation.id'] === 'trace-after-probes')
  t.equal(probeSpans().length, before)
})

t.test('TRACE_PROBES=true traces them', async (t) => {
  const app = await buildTestApp(t, { TRACE_PROBES: 'true' })
  await app.inject({ url: '/health/live', headers: { 'x-correlation-id': 'trace-probe-on' } })
  const probe = await receiver.span('the probe span', (span) => span.attributes['correlation.id'] === 'trace-probe-on')
  t.equal(probe.attributes['http.route'], '/health/live')
})

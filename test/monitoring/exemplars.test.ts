import t from 'tap'
import { buildTestApp } from '../helpers/app.js'
import { traceThisProcess } from '../helpers/otlp-receiver.js'
import { PrometheusServer } from '../helpers/monitoring-servers.js'
import { skipWithout } from '../helpers/packages.js'
import { waitFor } from '../helpers/processes.js'

t.test('a real Prometheus with the shipped flags keeps the exemplar, and scrapes the whole OpenMetrics exposition', { skip: skipWithout(['prometheus']) }, async (t) => {
  // Tracing starts inside the test: with Prometheus absent this file is loaded beside other tests, which it must not trace.
  const receiver = await traceThisProcess(t)
  const app = await buildTestApp(t)
  const address = new URL(await app.listen({ port: 0, host: '127.0.0.1' })).host
  t.equal((await app.inject({ url: '/api/invoices', headers: { 'x-correlation-id': 'trace-exemplar-stored' } })).statusCode, 401)
  const request = await receiver.span('the request span', (span) => span.attributes['correlation.id'] === 'trace-exemplar-stored')
  const prometheus = await PrometheusServer.start({ targets: [{ address }] })
  t.teardown(() => prometheus.stop())
  const selector = 'portal_bff_http_request_duration_seconds_bucket{route="/api/invoices",status_class="4xx"}'
  await waitFor('the exemplar in Prometheus', async () => (await prometheus.exemplars(selector)).some((exemplar) => exemplar.labels.trace_id === request.traceId), 30_000)
  const [target] = await prometheus.targets()
  t.match(target, { health: 'up', lastError: '' }, 'every line of the exposition parsed')
  t.same((await prometheus.query('portal_bff_cache_reads_total')).map(({ metric }) => metric.result).sort(), ['hit', 'miss'], 'a counter under its usual name')
})

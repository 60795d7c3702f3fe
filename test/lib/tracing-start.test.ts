import t from 'tap'
import { createRequire } from 'node:module'
import { activeExporters, startTracing, tracingRequested } from '../../lib/tracing-start.js'
import { tracingEnabled } from '../../lib/tracing.js'

const loadedSdk = () => Object.keys(createRequire(import.meta.url).cache).filter((path) => /@opentelemetry[\\/](sdk-|exporter-|resources)/.test(path))

t.test('without an endpoint no SDK is loaded and nothing is traced', async (t) => {
  t.equal(await startTracing({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' }, 'portal-bff'), undefined)
  t.same(loadedSdk(), [], 'not one module of the SDK in the process')
  t.notOk(tracingEnabled())
})

t.test('an endpoint asks for traces, unless OTEL_SDK_DISABLED', async (t) => {
  t.ok(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }))
  t.ok(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }))
  t.notOk(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }), 'empty counts as unset')
  t.notOk(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' }))
})

t.test('OTEL_TRACES_EXPORTER: none asks for no traces, console for traces without an endpoint, otlp for traces only with one', async (t) => {
  t.notOk(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }))
  t.ok(tracingRequested({ OTEL_TRACES_EXPORTER: 'console' }))
  t.notOk(tracingRequested({ OTEL_TRACES_EXPORTER: 'otlp' }), 'no endpoint: nowhere to send them')
  t.same(activeExporters({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'otlp, console' }), ['otlp', 'console'])
  t.same(activeExporters({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'zipkin' }), ['otlp'], 'an exporter the service lacks is passed over (with a warning at start)')
  t.equal(await startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }, 'portal-bff'), undefined)
  t.same(loadedSdk(), [], 'none: not one module of the SDK in the process')
})

t.test('a protocol the service cannot export with stops the start, naming the setting', async (t) => {
  await t.rejects(startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'portal-bff'),
    { message: 'OTEL_EXPORTER_OTLP_PROTOCOL must be one of http/protobuf, http/json (got "grpc")' })
  await t.rejects(startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'udp' }, 'portal-bff'),
    { message: /^OTEL_EXPORTER_OTLP_TRACES_PROTOCOL must be/ })
  t.notOk(tracingEnabled(), 'and nothing was started')
})

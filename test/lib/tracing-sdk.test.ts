import t from 'tap'
import { arch, hostname } from 'node:os'
import { ROOT_CONTEXT, SpanKind, TraceFlags, type Link } from '@opentelemetry/api'
import { SamplingDecision, type Sampler } from '@opentelemetry/sdk-trace-node'
import { samplerOf } from '../../lib/tracing-sampler.js'
import { propagatorOf, resourceOf } from '../../lib/tracing-sdk.js'
import { batchOptionsOf, tracingSettingWarnings } from '../../lib/tracing-settings.js'

t.test('OTEL_PROPAGATORS chooses what carries a trace: W3C trace context and baggage by default', async (t) => {
  t.same(propagatorOf({})?.fields().sort(), ['baggage', 'traceparent', 'tracestate'])
  t.same(propagatorOf({ OTEL_PROPAGATORS: 'tracecontext' })?.fields().sort(), ['traceparent', 'tracestate'])
  t.same(propagatorOf({ OTEL_PROPAGATORS: ' baggage ' })?.fields(), ['baggage'])
  t.equal(propagatorOf({ OTEL_PROPAGATORS: 'none' }), null, 'none: nothing read, nothing sent')
})

t.test('an OTEL_* value the SDK would pass over silently is a warning naming the setting and what is used', async (t) => {
  t.same(tracingSettingWarnings({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1', OTEL_TRACES_EXPORTER: 'otlp,console', OTEL_PROPAGATORS: 'tracecontext', OTEL_LOG_LEVEL: 'DEBUG' }), [], 'valid values: none')
  t.same(tracingSettingWarnings({ OTEL_TRACES_SAMPLER: 'sometimes' }), ['OTEL_TRACES_SAMPLER: "sometimes" is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio; parentbased_always_on is used'])
  t.match(tracingSettingWarnings({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '10%' }), [/^OTEL_TRACES_SAMPLER_ARG: "10%" is not a ratio from 0 to 1; 1 is used/])
  t.match(tracingSettingWarnings({ OTEL_TRACES_EXPORTER: 'jaeger' }), [/^OTEL_TRACES_EXPORTER: "jaeger" is not one of otlp, console, none/])
  t.match(tracingSettingWarnings({ OTEL_PROPAGATORS: 'tracecontext,b3' }), [/^OTEL_PROPAGATORS: "b3" is not one of tracecontext, baggage, none/])
  t.match(tracingSettingWarnings({ OTEL_LOG_LEVEL: 'loud' }), [/^OTEL_LOG_LEVEL: "loud" is not one of/])
  t.same(tracingSettingWarnings({ OTEL_BSP_SCHEDULE_DELAY: '200', OTEL_BSP_MAX_QUEUE_SIZE: '4096', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '256', OTEL_BSP_EXPORT_TIMEOUT: '1000' }), [], 'valid batch settings: none')
  t.same(tracingSettingWarnings({ OTEL_BSP_SCHEDULE_DELAY: 'soon', OTEL_BSP_MAX_QUEUE_SIZE: '0' }), [
    'OTEL_BSP_SCHEDULE_DELAY: "soon" is not a whole number of at least 1; 5000 is used',
    'OTEL_BSP_MAX_QUEUE_SIZE: "0" is not a whole number of at least 1; 2048 is used'
  ])
})

t.test('the OTEL_BSP_* settings give every option of the batch span processor, the default for one unset or invalid', async (t) => {
  const defaults = { scheduledDelayMillis: 5000, exportTimeoutMillis: 30_000, maxQueueSize: 2048, maxExportBatchSize: 512 }
  t.same(batchOptionsOf({}), defaults, 'unset: the defaults')
  t.same(
    batchOptionsOf({ OTEL_BSP_SCHEDULE_DELAY: '200', OTEL_BSP_EXPORT_TIMEOUT: ' 1000 ', OTEL_BSP_MAX_QUEUE_SIZE: '4096', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '256' }),
    { scheduledDelayMillis: 200, exportTimeoutMillis: 1000, maxQueueSize: 4096, maxExportBatchSize: 256 }
  )
  t.same(batchOptionsOf({ OTEL_BSP_SCHEDULE_DELAY: '1.5', OTEL_BSP_MAX_QUEUE_SIZE: '0', OTEL_BSP_EXPORT_TIMEOUT: '-1' }), defaults, 'not a whole number of at least 1: the default, as the warning says')
})

t.test('a parent-based sampler keeps a span without a parent exactly when the span it links to was kept', async (t) => {
  const linkTo = (traceFlags: number): Link[] => [{ context: { traceId: 'a'.repeat(32), spanId: 'b'.repeat(16), traceFlags } }]
  const decision = (sampler: Sampler, links: Link[]) => sampler.shouldSample(ROOT_CONTEXT, 'c'.repeat(32), 'hand-off', SpanKind.CONSUMER, {}, links).decision
  const keepsNone = samplerOf({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' })
  t.equal(decision(keepsNone, linkTo(TraceFlags.SAMPLED)), SamplingDecision.RECORD_AND_SAMPLED, 'kept with what it links to, whatever the ratio')
  t.equal(decision(keepsNone, linkTo(TraceFlags.NONE)), SamplingDecision.NOT_RECORD, 'left out with it')
  t.equal(decision(keepsNone, []), SamplingDecision.NOT_RECORD, 'without a link: the ratio')
  t.equal(decision(samplerOf({}), []), SamplingDecision.RECORD_AND_SAMPLED, 'default parentbased_always_on')
  t.equal(decision(samplerOf({ OTEL_TRACES_SAMPLER: 'always_off' }), linkTo(TraceFlags.SAMPLED)), SamplingDecision.NOT_RECORD, 'a sampler that is not parent-based ignores links, as it ignores parents')
})

t.test('the resource names the service\'s instance, its host, system and process; OTEL_RESOURCE_DETECTORS chooses which', async (t) => {
  const attributesOf = async (env: NodeJS.ProcessEnv) => {
    const resource = resourceOf(env, 'portal-bff')
    await resource.waitForAsyncAttributes?.()
    return resource.attributes
  }
  const all = await attributesOf({})
  t.match(all, {
    'service.name': 'portal-bff',
    'service.instance.id': /^[0-9a-f-]{36}$/,
    'host.name': hostname(),
    'host.arch': arch() === 'x64' ? 'amd64' : String,
    'os.type': 'linux',
    'process.pid': process.pid,
    'process.runtime.name': 'nodejs',
    'process.runtime.version': process.versions.node,
    'telemetry.sdk.language': 'nodejs'
  }, 'all by default')
  t.same(await attributesOf({ OTEL_RESOURCE_DETECTORS: 'all' }), all, 'all, as OpenTelemetry names it; one instance id a process')

  const hostOnly = await attributesOf({ OTEL_RESOURCE_DETECTORS: 'host, serviceinstance' })
  t.ok(hostOnly['host.name'] !== undefined && hostOnly['service.instance.id'] !== undefined)
  t.notOk('process.pid' in hostOnly || 'os.type' in hostOnly, 'only those named')
  const none = await attributesOf({ OTEL_RESOURCE_DETECTORS: 'none' })
  t.same(Object.keys(none).filter((key) => !key.startsWith('telemetry.sdk.')), ['service.name'], 'none: the service\'s name alone')
  t.same(await attributesOf({ OTEL_NODE_RESOURCE_DETECTORS: 'none' }), none, 'OpenTelemetry JS\'s name of the setting, when the standard one is unset')
  t.ok('process.pid' in await attributesOf({ OTEL_RESOURCE_DETECTORS: 'process', OTEL_NODE_RESOURCE_DETECTORS: 'none' }), 'the standard one wins')

  t.same(tracingSettingWarnings({ OTEL_RESOURCE_DETECTORS: 'env,host,os,process,serviceinstance' }), [])
  t.same(tracingSettingWarnings({ OTEL_NODE_RESOURCE_DETECTORS: 'host,docker' }), ['OTEL_NODE_RESOURCE_DETECTORS: "docker" is not one of host, os, process, serviceinstance, env, all, none; the others are used (nothing detected when none is left)'])
})

t.test('OTEL_RESOURCE_ATTRIBUTES wins over a detected attribute', async (t) => {
  const before = process.env.OTEL_RESOURCE_ATTRIBUTES
  // The SDK's env detector reads the process's environment.
  process.env.OTEL_RESOURCE_ATTRIBUTES = 'host.name=portal-1.example,deployment.environment.name=test'
  t.teardown(() => { if (before === undefined) delete process.env.OTEL_RESOURCE_ATTRIBUTES; else process.env.OTEL_RESOURCE_ATTRIBUTES = before })
  const resource = resourceOf({ OTEL_RESOURCE_DETECTORS: 'host' }, 'portal-bff')
  await resource.waitForAsyncAttributes?.()
  t.match(resource.attributes, { 'host.name': 'portal-1.example', 'deployment.environment.name': 'test' })
})

import t from 'tap'
import { ROOT_CONTEXT, SpanKind, TraceFlags, type Link } from '@opentelemetry/api'
import { SamplingDecision, type Sampler } from '@opentelemetry/sdk-trace-node'
import { samplerOf } from '../../lib/tracing-sampler.js'
import { propagatorOf } from '../../lib/tracing-sdk.js'
import { tracingSettingWarnings } from '../../lib/tracing-settings.js'

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

import t from 'tap'
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

import t from 'tap'
import { propagatorOf } from '../../lib/tracing-sdk.js'

t.test('OTEL_PROPAGATORS chooses what carries a trace: W3C trace context and baggage by default', async (t) => {
  t.same(propagatorOf({})?.fields().sort(), ['baggage', 'traceparent', 'tracestate'])
  t.same(propagatorOf({ OTEL_PROPAGATORS: 'tracecontext' })?.fields().sort(), ['traceparent', 'tracestate'])
  t.same(propagatorOf({ OTEL_PROPAGATORS: ' baggage ' })?.fields(), ['baggage'])
  t.equal(propagatorOf({ OTEL_PROPAGATORS: 'none' }), null, 'none: nothing read, nothing sent')
})

import t from 'tap'
import { OtlpReceiver } from '../helpers/otlp-receiver.js'
import { waitFor } from '../helpers/processes.js'
import { startTracing } from '../../lib/tracing-start.js'
import { inSpan } from '../../lib/tracing.js'

// The SDK is process-wide: this file starts its own, with batch settings no other test uses.
const receiver = await OtlpReceiver.start()
// The exporter reads its endpoint from the process's environment itself.
Object.assign(process.env, {
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  // Ten minutes: a span reaches the collector now only because a batch of one is full.
  OTEL_BSP_SCHEDULE_DELAY: '600000',
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '1',
  // Not a whole number of at least 1: warned at start as "2048 is used", and so it must be (a queue of 0 holds nothing).
  OTEL_BSP_MAX_QUEUE_SIZE: '0'
})
const tracing = (await startTracing(process.env, 'portal-bff'))!
t.teardown(async () => {
  await tracing.shutdown(2000)
  await receiver.close()
})

t.test('the OTEL_BSP_* settings reach the running batch span processor: a batch of one is exported alone, at once; an invalid queue size is the default', async (t) => {
  for (const name of ['first', 'second', 'third']) await inSpan(`batch ${name}`, { root: true }, async () => {})
  await waitFor('the three spans', async () => receiver.spans.filter(({ name }) => name.startsWith('batch ')).length === 3, 10_000)
  // The SDK's defaults (512 a batch, 5 s apart) would have sent the three in one export.
  t.equal(receiver.exports, 3, 'one export a span')
})

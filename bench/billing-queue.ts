import { BillingClient } from '../integrations/billing.js'
import { RequestQueue } from '../lib/request-queue.js'
import { startSandbox } from '../sandbox/index.js'
import { ROUNDS, SECONDS, median, ownPeakRssMb } from './common.js'

const CONCURRENCY = 10

/** Calls made back to back by `CONCURRENCY` callers for a while; returns calls per second. */
async function drive (call: () => Promise<unknown>): Promise<number> {
  const deadline = performance.now() + SECONDS * 1000
  let calls = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < deadline) {
      await call()
      calls++
    }
  }))
  return calls / SECONDS
}

/** A billing call through its request queue against the same call made directly, alternating. */
export async function benchBillingQueue (): Promise<void> {
  const sandbox = await startSandbox()
  const billing = new BillingClient({
    url: sandbox.settings.BILLING_API_URL!,
    identifier: sandbox.settings.BILLING_API_IDENTIFIER!,
    secret: sandbox.settings.BILLING_API_SECRET!
  })
  const queue = new RequestQueue({
    name: 'billing',
    concurrency: CONCURRENCY,
    timeoutMs: 8000,
    maxSize: 100,
    windowMs: 300_000,
    thresholds: { queueSize: 'billing_queue_size', failedRequests: 'billing_failed_requests' }
  })
  const direct = () => billing.call('WhmcsDetails', {})
  const queued = () => queue.run((signal) => billing.call('WhmcsDetails', {}, signal))
  try {
    await drive(direct)
    const rates = { direct: [] as number[], queued: [] as number[] }
    for (let round = 0; round < ROUNDS; round++) {
      rates.direct.push(await drive(direct))
      rates.queued.push(await drive(queued))
    }
    const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length
    const [directRate, queuedRate] = [mean(rates.direct), mean(rates.queued)]
    process.stdout.write([
      '',
      `Billing WhmcsDetails against the sandbox, concurrency ${CONCURRENCY}, ${ROUNDS} alternating rounds of ${SECONDS} s`,
      `  direct:                           ${directRate.toFixed(0)} calls/s`,
      `  through the billing queue:        ${queuedRate.toFixed(0)} calls/s (queue failures: ${queue.metrics().failedRequests})`,
      `  ratio queued / direct:            ${(queuedRate / directRate).toFixed(3)}, median of rounds ${median(rates.queued.map((queued, round) => queued / rates.direct[round]!)).toFixed(3)} (target >= 0.95)`,
      `  bench process peak RSS so far:    ${ownPeakRssMb().toFixed(0)} MB`,
      ''
    ].join('\n'))
  } finally {
    await billing.close()
    await sandbox.close()
  }
}

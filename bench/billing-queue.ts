import { BillingClient } from '../integrations/billing.js'
import { RequestQueue } from '../lib/request-queue.js'
import { startSandbox } from '../sandbox/index.js'
import { startSandboxProcess } from '../tools/sandbox-process.js'
import { ROUNDS, SECONDS, median, ownPeakRssMb } from './common.js'

const CONCURRENCY = 10
// Shorter rounds and more of them than the other suites: the ratio sought is close to 1, and the
// rate of this machine drifts by more than that within a few seconds.
const ROUNDS_OF_CALLS = Number(process.env.BENCH_QUEUE_ROUNDS ?? Math.max(ROUNDS, 8))
const SECONDS_OF_CALLS = Number(process.env.BENCH_QUEUE_SECONDS ?? Math.min(SECONDS, 2))

interface Rates { direct: number[], queued: number[] }

/** Calls made back to back by `CONCURRENCY` callers for a while; returns calls per second. */
async function drive (call: () => Promise<unknown>): Promise<number> {
  const deadline = performance.now() + SECONDS_OF_CALLS * 1000
  let calls = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < deadline) {
      await call()
      calls++
    }
  }))
  return calls / SECONDS_OF_CALLS
}

/** `WhmcsDetails` directly and through a billing queue of concurrency 10, alternating which goes first. */
async function measure (settings: Record<string, string | undefined>): Promise<Rates & { queueFailures: number }> {
  const billing = new BillingClient({
    url: settings.BILLING_API_URL!,
    identifier: settings.BILLING_API_IDENTIFIER!,
    secret: settings.BILLING_API_SECRET!
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
    await drive(queued)
    const rates: Rates = { direct: [], queued: [] }
    for (let round = 0; round < ROUNDS_OF_CALLS; round++) {
      const order = round % 2 === 0 ? ['direct', 'queued'] as const : ['queued', 'direct'] as const
      for (const way of order) rates[way].push(await drive(way === 'direct' ? direct : queued))
    }
    return { ...rates, queueFailures: queue.metrics().failedRequests }
  } finally {
    await billing.close()
  }
}

function report (arrangement: string, { direct, queued, queueFailures }: Rates & { queueFailures: number }): string[] {
  const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length
  const perRound = queued.map((rate, round) => rate / direct[round]!)
  return [
    `  ${arrangement}`,
    `    direct:                         ${mean(direct).toFixed(0)} calls/s`,
    `    through the billing queue:      ${mean(queued).toFixed(0)} calls/s (queue failures: ${queueFailures})`,
    `    ratio queued / direct:          ${(mean(queued) / mean(direct)).toFixed(3)}, median of rounds ${median(perRound).toFixed(3)} (target >= 0.95)`
  ]
}

/**
 * A billing call through its request queue against the same call made directly, against the
 * sandbox in two arrangements: in its own process, as the service meets a billing system, and in
 * this process, where the simulator's work shares the client's event loop and every microsecond
 * of the queue shows.
 */
export async function benchBillingQueue (): Promise<void> {
  const apart = await startSandboxProcess()
  const ownProcess = await measure(apart.settings).finally(apart.stop)
  const inProcess = await startSandbox()
  const sharedProcess = await measure(inProcess.settings).finally(inProcess.close)
  process.stdout.write([
    '',
    `Billing WhmcsDetails against the sandbox, concurrency ${CONCURRENCY}, ${ROUNDS_OF_CALLS} alternating rounds of ${SECONDS_OF_CALLS} s`,
    ...report('sandbox in its own process (npm run sandbox):', ownProcess),
    ...report('sandbox in the benchmark process (one event loop for client and simulator):', sharedProcess),
    `  bench process peak RSS:           ${ownPeakRssMb().toFixed(0)} MB`,
    ''
  ].join('\n'))
}

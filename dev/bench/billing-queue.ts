import PQueue from 'p-queue'
import { BillingClient } from '../../integrations/billing/client.js'
import { RequestQueue } from '../../lib/request-queue.js'
import { startSandboxProcess } from '../tools/sandbox-process.js'
import { ROUNDS, SECONDS, median, ownPeakRssMb } from './common.js'

const CONCURRENCY = 10
// Shorter rounds and more of them than the other suites: the ratio sought is close to 1, and the
// rate of this machine drifts by more than that within a few seconds.
const ROUNDS_OF_CALLS = Number(process.env.BENCH_QUEUE_ROUNDS ?? Math.max(ROUNDS, 8))
const SECONDS_OF_CALLS = Number(process.env.BENCH_QUEUE_SECONDS ?? Math.min(SECONDS, 2))
// What every billing answer takes in the second arrangement: as in the provisioning suite, far
// less than a WHMCS installation over the network takes, yet enough to make the upstream the limit.
const UPSTREAM_LATENCY_MS = Number(process.env.BENCH_QUEUE_LATENCY_MS ?? 20)

interface Drive { rate: number, cpuMicrosPerCall: number }
const WAYS = ['direct', 'pQueue', 'queued'] as const
type Way = typeof WAYS[number]
type Ways = Record<Way, Drive[]> & { queueFailures: number }

/** Calls made back to back by `CONCURRENCY` callers for a while: calls per second and this process's CPU per call. */
async function drive (call: () => Promise<unknown>): Promise<Drive> {
  const cpuBefore = process.cpuUsage()
  const deadline = performance.now() + SECONDS_OF_CALLS * 1000
  let calls = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < deadline) {
      await call()
      calls++
    }
  }))
  const cpu = process.cpuUsage(cpuBefore)
  return { rate: calls / SECONDS_OF_CALLS, cpuMicrosPerCall: (cpu.user + cpu.system) / calls }
}

/** Every billing answer `ms` late, by the sandbox's own fault injection. */
async function delayAnswers (billingUrl: string, ms: number): Promise<void> {
  const response = await fetch(new URL('/__sandbox/faults', billingUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ kind: 'latency', ms })
  })
  if (!response.ok) throw new Error(`the sandbox refused the latency fault: HTTP ${response.status}`)
}

/**
 * `WhmcsDetails` directly, through a bare p-queue (the floor of the queue's cost: the billing queue
 * runs on p-queue, and what it costs beyond that row is its deadline and metrics) and through a
 * billing queue, each of concurrency 10, in another order every round.
 */
async function measure (settings: Record<string, string>): Promise<Ways> {
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
    windowMs: 300_000
  })
  const bare = new PQueue({ concurrency: CONCURRENCY })
  const calls: Record<Way, () => Promise<unknown>> = {
    direct: () => billing.call('WhmcsDetails', {}),
    pQueue: () => bare.add(() => billing.call('WhmcsDetails', {})),
    queued: () => queue.run((deadline) => billing.call('WhmcsDetails', {}, deadline))
  }
  try {
    for (const way of WAYS) await drive(calls[way])
    const ways: Ways = { direct: [], pQueue: [], queued: [], queueFailures: 0 }
    for (let round = 0; round < ROUNDS_OF_CALLS; round++) {
      const order = WAYS.map((_, i) => WAYS[(i + round) % WAYS.length]!)
      for (const way of order) ways[way].push(await drive(calls[way]))
    }
    return { ...ways, queueFailures: queue.metrics().failedRequests }
  } finally {
    await billing.close()
  }
}

async function measureAgainstSandbox (latencyMs: number): Promise<Ways> {
  const sandbox = await startSandboxProcess()
  try {
    if (latencyMs > 0) await delayAnswers(sandbox.settings.BILLING_API_URL!, latencyMs)
    return await measure(sandbox.settings)
  } finally {
    await sandbox.stop()
  }
}

/**
 * CPU per call is printed where the calls keep this process busy: at a few hundred calls a second
 * its idle work (timers, garbage collection) weighs on each call as much as the queue does.
 */
function report (arrangement: string, { direct, pQueue, queued, queueFailures }: Ways, withCpu: boolean): string[] {
  const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length
  const rate = (drives: Drive[]) => mean(drives.map(({ rate }) => rate))
  const cpu = (drives: Drive[]) => mean(drives.map(({ cpuMicrosPerCall }) => cpuMicrosPerCall))
  const perRound = queued.map((drive, round) => drive.rate / direct[round]!.rate)
  const cpuOf = (drives: Drive[]) => withCpu ? `, ${cpu(drives).toFixed(1)} µs of CPU a call` : ''
  return [
    `  ${arrangement}`,
    `    direct:                         ${rate(direct).toFixed(0)} calls/s${cpuOf(direct)}`,
    `    through a bare p-queue:         ${rate(pQueue).toFixed(0)} calls/s${cpuOf(pQueue)}`,
    `    through the billing queue:      ${rate(queued).toFixed(0)} calls/s${cpuOf(queued)} (queue failures: ${queueFailures})`,
    ...withCpu ? [`    the queue's CPU a call:         ${(cpu(queued) - cpu(direct)).toFixed(1)} µs (a bare p-queue's ${(cpu(pQueue) - cpu(direct)).toFixed(1)} µs)`] : [],
    `    ratio bare p-queue / direct:    ${(rate(pQueue) / rate(direct)).toFixed(3)} (the most the billing queue, built on it, can keep)`,
    `    ratio queued / direct:          ${(rate(queued) / rate(direct)).toFixed(3)}, median of rounds ${median(perRound).toFixed(3)} (target >= 0.95)`
  ]
}

/**
 * A billing call through its request queue against the same call made directly (and through a bare
 * p-queue, which the queue is built on), the sandbox in its own process (what `npm run sandbox`
 * runs), in two arrangements: answering at once, where this process's CPU is the limit and the
 * ratio is the queue's CPU cost against the call's; and every answer `UPSTREAM_LATENCY_MS` late,
 * where the upstream is the limit, as a billing system is.
 */
export async function benchBillingQueue (): Promise<void> {
  const immediate = await measureAgainstSandbox(0)
  const delayed = UPSTREAM_LATENCY_MS > 0 ? await measureAgainstSandbox(UPSTREAM_LATENCY_MS) : undefined
  process.stdout.write([
    '',
    `Billing WhmcsDetails against the sandbox in its own process, concurrency ${CONCURRENCY}, ${ROUNDS_OF_CALLS} alternating rounds of ${SECONDS_OF_CALLS} s`,
    ...report('answers at once (the client\'s CPU is the limit):', immediate, true),
    ...(delayed === undefined ? [] : report(`every answer ${UPSTREAM_LATENCY_MS} ms late (the upstream is the limit):`, delayed, false)),
    `  bench process peak RSS:           ${ownPeakRssMb().toFixed(0)} MB`,
    ''
  ].join('\n'))
}

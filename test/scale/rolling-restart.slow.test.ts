import t from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { request, type Dispatcher } from 'undici'
import { ORDER_PROVISION_CHANNEL } from '../../plugins/app/platform-events/subscription.js'
import { ensureTestDatabase, startTestSandbox, testEnv, testKeyPrefix, testSchemaUrl } from '../helpers/app.js'
import { startShippedHaproxy } from '../helpers/haproxy.js'
import { skipWithout } from '../helpers/packages.js'
import { SHARED_REDIS } from '../helpers/made.js'
import { freePort } from '../helpers/ports.js'
import { waitFor } from '../helpers/processes.js'
import { startProductService, type ServiceProcess } from '../helpers/service-process.js'
import { SseClient } from '../helpers/sse.js'
import { bearer } from '../helpers/tokens.js'

// The shipped configuration checks every second and marks an instance down after 2 failures,
// against a 5 s delay. Here HAProxy checks every 250 ms (down within 500 ms) against a 1.5 s delay:
// a margin as wide (3x against 2.5x), at a pace that keeps the test short.
const INTER_MS = 250
const SHUTDOWN_DELAY_MS = 1500
const LEASE_TTL_MS = 6000

interface Teardown { teardown (fn: () => unknown): void }

/** The shared parts of one deployment's instances: a database schema, a Redis prefix, upstreams. */
async function deployment (t: Teardown) {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  return {
    ...sandbox.settings,
    DATABASE_URL: await testSchemaUrl(t),
    REDIS_KEY_PREFIX: testKeyPrefix(),
    SHUTDOWN_DELAY_MS: String(SHUTDOWN_DELAY_MS),
    CRM_EVENTS_ENABLED: 'true',
    CRM_EVENTS_LEASE_TTL_MS: String(LEASE_TTL_MS),
    // Behind the balancer, as deployed: the client address comes from X-Forwarded-For.
    TRUST_PROXY: '127.0.0.1',
    // The load is one client: it is about restarts, not the rate limiter.
    RATE_LIMIT_MAX: '100000000'
  }
}

/** Starts the built service, killed by PID when the test ends whatever happened. */
async function start (t: Teardown, env: Record<string, string>): Promise<ServiceProcess> {
  const service = await startProductService(env)
  t.teardown(() => { if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill('SIGKILL') })
  return service
}

/** Every promise settled before the first failure is thrown: no process starts after the test has ended. */
async function all<T extends readonly unknown[]> (promises: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const outcomes = await Promise.allSettled(promises)
  const failed = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected')
  if (failed !== undefined) throw failed.reason
  return outcomes.map((outcome) => (outcome as PromiseFulfilledResult<unknown>).value) as unknown as T
}

/** The first answer of `url`, asked every 20 ms from now on: connections refused until it listens. */
async function firstAnswer (url: string, timeoutMs = 30_000): Promise<number> {
  const deadline = performance.now() + timeoutMs
  for (;;) {
    try {
      const response = await request(url, { reset: true })
      await response.body.dump()
      return response.statusCode
    } catch (error) {
      if (performance.now() > deadline) throw error
      await sleep(20)
    }
  }
}

async function signIn (url: string, dispatcher?: Dispatcher): Promise<string> {
  const response = await request(`${url}/auth/login`, { dispatcher, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  if (response.statusCode !== 200) throw new Error(`sign-in failed: ${response.statusCode} ${await response.body.text()}`)
  return ((await response.body.json()) as { accessToken: string }).accessToken
}

/** Resident memory now and at its peak, in MiB, and CPU seconds so far, from /proc. */
function processFigures (pid: number): { rssMiB: number, peakMiB: number, cpuSeconds: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0)
  // utime and stime, fields 14 and 15, in clock ticks (100 a second on Linux).
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return { rssMiB: kb('VmRSS') / 1024, peakMiB: kb('VmHWM') / 1024, cpuSeconds: (Number(fields[11]) + Number(fields[12])) / 100 }
}

t.test('rolling restart of three instances behind HAProxy under load: no failed request, every exit 0', { skip: skipWithout(['haproxy', 'openssl']) }, async (t) => {
  const env = await deployment(t)
  const ports = await Promise.all([freePort(), freePort(), freePort()])
  const envOf = ports.map((port) => testEnv({ ...env, PORT: String(port) }))
  const instances = await all(envOf.map((instanceEnv) => start(t, instanceEnv)))

  const haproxy = await startShippedHaproxy(t, { serverPorts: ports, interMs: INTER_MS })
  const { fall, rise } = haproxy.settings
  t.ok(INTER_MS * fall * 2 < SHUTDOWN_DELAY_MS, `down within ${INTER_MS * fall} ms, under half the ${SHUTDOWN_DELAY_MS} ms delay`)
  const token = await signIn(haproxy.url, haproxy.dispatcher)

  const started = performance.now()
  const now = () => Math.round(performance.now() - started)
  const failures: Array<{ at: number, statusCode?: number, error?: string }> = []
  let load: autocannon.Instance | undefined
  // Stopped once every instance has been restarted.
  const finished = new Promise<autocannon.Result>((resolve, reject) => {
    load = autocannon({
      url: haproxy.url,
      connections: 10,
      duration: 600,
      requests: [{ method: 'GET', path: '/health' }, { method: 'GET', path: '/api/orders', headers: bearer(token) }]
    }, (error, result) => error === null || error === undefined ? resolve(result) : reject(error))
  })
  t.teardown(() => load!.stop())
  load!.on('response', (_client, statusCode) => { if (statusCode < 200 || statusCode > 299) failures.push({ at: now(), statusCode }) })
  load!.on('reqError', (error: Error) => failures.push({ at: now(), error: String(error.message) }))
  await sleep(1500)

  const stateChange = (name: string, state: 'UP' | 'DOWN', after: number) =>
    haproxy.lines.find((line) => line.at > after && new RegExp(`Server portal_bff/${name} is ${state}\\b`).test(line.text))
  const restarts: Array<{ instance: string, downAfterMs: number, exitAfterMs: number, code: number | null, upAfterStartMs: number, firstReadiness: number }> = []
  for (const [index, instance] of instances.entries()) {
    const name = `bff${index + 1}`
    const signalled = performance.now()
    instance.child.kill('SIGTERM')
    const code = await instance.exit
    const exitAfterMs = Math.round(performance.now() - signalled)
    const down = stateChange(name, 'DOWN', signalled)
    const restarting = performance.now()
    const [firstReadiness, again] = await all<[number, ServiceProcess]>([firstAnswer(`http://127.0.0.1:${ports[index]}/health/ready`), start(t, envOf[index]!)])
    instances[index] = again
    await waitFor(`HAProxy to take ${name} back`, async () => stateChange(name, 'UP', restarting) !== undefined, 10_000)
    restarts.push({
      instance: name,
      downAfterMs: down === undefined ? NaN : Math.round(down.at - signalled),
      exitAfterMs,
      code,
      upAfterStartMs: Math.round(stateChange(name, 'UP', restarting)!.at - restarting),
      firstReadiness
    })
  }
  await sleep(1000)

  const cpuBefore = instances.map((instance) => processFigures(instance.child.pid!))
  await sleep(2000)
  const figures = instances.map((instance, index) => {
    const after = processFigures(instance.child.pid!)
    return { rssMiB: Math.round(after.rssMiB), peakMiB: Math.round(after.peakMiB), cores: Number(((after.cpuSeconds - cpuBefore[index]!.cpuSeconds) / 2).toFixed(2)) }
  })
  load!.stop()
  const { requests, non2xx, errors, timeouts, duration } = await finished

  t.comment(`load: ${requests.total} requests in ${duration} s (${Math.round(requests.total / duration)}/s) through HAProxy, ${non2xx} non-2xx, ${errors} errors, ${timeouts} timeouts`)
  for (const restart of restarts) t.comment(JSON.stringify(restart))
  t.comment(`instances after the restarts (RSS, peak RSS in MiB; cores over 2 s of load): ${JSON.stringify(figures)}`)
  const anomalies = haproxy.lines.filter((line) => /"(GET|POST) /.test(line.text))
  t.comment(`HAProxy logged ${anomalies.length} request(s) retried, redispatched or failed${anomalies.length > 0 ? `:\n${anomalies.slice(0, 5).map((line) => line.text).join('\n')}` : ''}`)

  t.ok(requests.total > 5000, `${requests.total} requests under load`)
  t.equal(non2xx, 0, 'no answer but 2xx')
  t.equal(errors, 0, 'no socket error or timeout')
  t.same(failures.slice(0, 10), [], 'no failed request, at any time')
  for (const restart of restarts) {
    t.equal(restart.code, 0, `${restart.instance} exited 0`)
    t.ok(restart.downAfterMs < SHUTDOWN_DELAY_MS, `${restart.instance}: HAProxy marked it down ${restart.downAfterMs} ms after SIGTERM, before its listener closed`)
    t.ok(restart.exitAfterMs >= SHUTDOWN_DELAY_MS && restart.exitAfterMs < SHUTDOWN_DELAY_MS + 3000, `${restart.instance}: exited ${restart.exitAfterMs} ms after SIGTERM`)
    t.equal(restart.firstReadiness, 200, `${restart.instance}: its first readiness answer, restarted, was 200 (nothing answers before it is ready)`)
    t.ok(restart.upAfterStartMs >= INTER_MS * (rise - 1), `${restart.instance}: back in rotation after ${rise} good checks`)
  }

  const redis = new Redis(SHARED_REDIS)
  t.teardown(() => redis.disconnect())
  const holder = await redis.get(`${env.REDIS_KEY_PREFIX}crm:pe:lease:${ORDER_PROVISION_CHANNEL}`)
  t.ok(instances.some((instance) => holder?.includes(`:${instance.child.pid}:`)), 'a running instance holds the platform-event subscription')
})

t.test('SIGTERM with an /api/events stream open: exit 0 soon after the delay, and the other instance takes the lease as the shutdown begins', async (t) => {
  const env = await deployment(t)
  const leaseKey = `${env.REDIS_KEY_PREFIX}crm:pe:lease:${ORDER_PROVISION_CHANNEL}`
  const redis = new Redis(SHARED_REDIS)
  t.teardown(() => redis.disconnect())
  const holds = async (service: ServiceProcess) => (await redis.get(leaseKey))?.includes(`:${service.child.pid}:`) === true

  const first = await start(t, testEnv(env))
  await waitFor('the first instance to hold the lease', () => holds(first))
  const second = await start(t, testEnv(env))
  const token = await signIn(first.url)
  const stream = await SseClient.open(`${first.url}/api/events`, bearer(token))
  t.equal(stream.status, 200)

  const signalled = performance.now()
  const since = () => Math.round(performance.now() - signalled)
  first.child.kill('SIGTERM')
  // Asked until it fails: a request may reach the process before the signal does.
  let readyAfterMs: number | undefined
  while (readyAfterMs === undefined && since() < SHUTDOWN_DELAY_MS) {
    const ready = await request(`${first.url}/health/ready`, { reset: true })
    await ready.body.dump()
    if (ready.statusCode === 503) readyAfterMs = since()
  }
  t.ok(readyAfterMs !== undefined && readyAfterMs < 200, `readiness answered 503 ${readyAfterMs} ms after SIGTERM: at once`)
  const lateStream = await SseClient.open(`${first.url}/api/events`, bearer(token))
  t.equal(lateStream.status, 200, 'streams are still served during the delay')

  // The lease, read every 20 ms from the signal until the second instance holds it.
  let releasedAt: number | undefined
  let takenAt: number | undefined
  const watching = (async () => {
    while (takenAt === undefined && since() < 20_000) {
      const value = await redis.get(leaseKey)
      if (releasedAt === undefined && value?.includes(`:${first.child.pid}:`) !== true) releasedAt = since()
      if (value?.includes(`:${second.child.pid}:`) === true) takenAt = since()
      await sleep(20)
    }
  })()
  const code = await first.exit
  const exitAfterMs = since()
  await watching

  t.equal(code, 0, 'exit 0')
  t.ok(exitAfterMs >= SHUTDOWN_DELAY_MS && exitAfterMs < SHUTDOWN_DELAY_MS + 3000, `exited ${exitAfterMs} ms after SIGTERM (SHUTDOWN_DELAY_MS ${SHUTDOWN_DELAY_MS})`)
  await waitFor('both streams to end', async () => stream.ended && lateStream.ended, 1000)
  for (const [which, client] of [['open', stream], ['opened during the delay', lateStream]] as const) {
    t.ok(client.events.some((event) => event.event === 'shutdown'), `the stream ${which} was told the instance is shutting down`)
  }
  // Attempts come every quarter of the lease: without the release, the second would wait for its expiry.
  const renewEveryMs = LEASE_TTL_MS / 4
  t.comment(`lease released ${releasedAt} ms and taken over ${takenAt} ms after SIGTERM; the process exited at ${exitAfterMs} ms`)
  t.ok(releasedAt !== undefined && releasedAt < SHUTDOWN_DELAY_MS, 'released as the shutdown began, while the instance serves out its delay (decision 0091)')
  t.ok(takenAt !== undefined && releasedAt !== undefined && takenAt - releasedAt < renewEveryMs + 500, `taken over within one renewal period (${renewEveryMs} ms) of the release, not at the lease's expiry (${LEASE_TTL_MS} ms)`)
  t.ok(await holds(second), 'the second instance holds it')
})

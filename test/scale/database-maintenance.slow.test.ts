import t from 'tap'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { request, type Dispatcher } from 'undici'
import { startTestSandbox, testEnv, testKeyPrefix } from '../helpers/app.js'
import { startShippedHaproxy } from '../helpers/haproxy.js'
import { skipWithout } from '../helpers/packages.js'
import { FAST_RECOVERY, ORDER, recovered } from '../helpers/placement.js'
import { PrivatePgBouncer } from '../helpers/private-pgbouncer.js'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { freePort } from '../helpers/ports.js'
import { waitFor } from '../helpers/processes.js'
import { startService, type ServiceProcess } from '../helpers/service-process.js'
import { bearer } from '../helpers/tokens.js'

// The acceptance's bound on /health saying ok again once PostgreSQL answers.
const RECOVERY_MS = 15_000
// How long a fault may take to show in /health: the check's bound and its reuse, on a busy machine.
const DETECTION_MS = 15_000
// The query bound set below, and the claim of a placement a fault cut midway that it gives (3 x 10 s
// + 2 x 1 s + 2 x 0.5 s, orders/order-placement.ts): the placement is taken up again once its claim
// runs out, and a try that fails right after a restart takes a new claim. Three claims bound it.
const QUERY_TIMEOUT_MS = 10_000
const CLAIM_MS = 3 * QUERY_TIMEOUT_MS + 2 * Number(FAST_RECOVERY.BILLING_QUEUE_TIMEOUT_MS) + 2 * Number(FAST_RECOVERY.CRM_QUEUE_TIMEOUT_MS)
const RECOVERED_MS = 3 * CLAIM_MS

t.setTimeout(6 * 60_000)

type DatabaseCheck = 'ok' | 'fail' | 'no answer'

/** The `database` check of one instance's /health, as a balancer or an operator reads it. */
async function databaseCheck (url: string): Promise<DatabaseCheck> {
  try {
    const response = await request(`${url}/health`, { reset: true, headersTimeout: 5000, bodyTimeout: 5000 })
    const body = await response.body.json() as { checks?: { database?: DatabaseCheck } }
    return body.checks?.database ?? 'no answer'
  } catch {
    return 'no answer'
  }
}

type OrderAnswer = { statusCode: number | 'no answer', code?: string }

/** Orders placed one after another through the balancer, each with a key of its own, until stopped; their answers go to `answers`. */
function placeOrders (url: string, token: string, answers: OrderAnswer[], dispatcher: Dispatcher) {
  const state = { stopped: false }
  const running = (async () => {
    while (!state.stopped) {
      try {
        const response = await request(`${url}${ORDER.url}`, {
          dispatcher,
          method: 'POST',
          headers: { ...bearer(token), 'content-type': 'application/json', 'idempotency-key': randomUUID() },
          body: JSON.stringify(ORDER.payload),
          headersTimeout: 20_000,
          bodyTimeout: 20_000
        })
        const body = await response.body.json() as { code?: string }
        answers.push({ statusCode: response.statusCode, code: body.code })
      } catch {
        answers.push({ statusCode: 'no answer' })
      }
      await sleep(200)
    }
  })()
  return { stop: async () => { state.stopped = true; await running } }
}

async function signIn (url: string, dispatcher: Dispatcher): Promise<string> {
  const response = await request(`${url}/auth/login`, { dispatcher, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'jane@example.com', password: 'correct-horse' }) })
  if (response.statusCode !== 200) throw new Error(`sign-in failed: ${response.statusCode} ${await response.body.text()}`)
  return ((await response.body.json()) as { accessToken: string }).accessToken
}

t.test('database maintenance under three instances, HAProxy and PgBouncer: a PAUSE, stopped backends and a restart end no process, and the service serves again', { skip: skipWithout(['haproxy', 'openssl', 'pgbouncer']) }, async (t) => {
  const cluster = await PrivatePostgres.start({ maxConnections: 100 })
  t.teardown(() => cluster.destroy())
  const bouncer = await PrivatePgBouncer.start({ database: 'postgres', poolSize: 20, server: cluster.url })
  t.teardown(() => bouncer.stop())
  const sandbox = await startTestSandbox(t)
  const ports = await Promise.all([freePort(), freePort(), freePort()])
  const shared = {
    ...sandbox.settings,
    ...FAST_RECOVERY,
    // As deployed: a query waits for its answer longer than the health check does, so that the
    // check's dropping of the connections lent out is what ends the queries a fault holds.
    DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS),
    // The placers never send a key twice: a placement a fault cut after billing took the order is
    // kept for a retry that never comes, and undone by the reconciliation a second later rather than
    // after the quarter of an hour a client is given (decision 0084).
    ORDERS_PLACEMENT_RESUME_S: '1',
    DATABASE_URL: bouncer.url,
    REDIS_KEY_PREFIX: testKeyPrefix(),
    TRUST_PROXY: '127.0.0.1',
    RATE_LIMIT_MAX: '100000000'
  }
  // The development entry with every upstream set is the service's own entry (no sandbox of its own).
  const instances: ServiceProcess[] = []
  for (const port of ports) {
    const instance = await startService(testEnv({ ...shared, PORT: String(port) }), { timeoutMs: 60_000 })
    t.teardown(() => { if (instance.child.exitCode === null && instance.child.signalCode === null) instance.child.kill('SIGKILL') })
    instances.push(instance)
  }
  const exits: string[] = []
  for (const [index, instance] of instances.entries()) {
    instance.exit.then((code) => exits.push(`instance ${index + 1} exited with ${code}: ${instance.stderr().slice(-2000)}`), () => {})
  }
  const haproxy = await startShippedHaproxy(t, { serverPorts: ports, interMs: 250 })
  const token = await signIn(haproxy.url, haproxy.dispatcher)

  const everyInstance = (check: DatabaseCheck) => async () => (await Promise.all(instances.map((instance) => databaseCheck(instance.url)))).every((seen) => seen === check)
  await waitFor('every instance healthy', everyInstance('ok'))
  // Two at a time, so that a fault finds placements inside their transaction.
  const answers: OrderAnswer[] = []
  const placers = [placeOrders(haproxy.url, token, answers, haproxy.dispatcher), placeOrders(haproxy.url, token, answers, haproxy.dispatcher)]
  const orders = { answers, stop: () => Promise.all(placers.map((placer) => placer.stop())) }
  t.teardown(() => orders.stop())
  const placed = () => orders.answers.filter((answer) => answer.statusCode === 201).length

  const faults: Array<{ name: string, begin: () => Promise<void>, holdMs: number, end: () => Promise<void> }> = [
    { name: 'PgBouncer PAUSEd for 20 s', begin: () => bouncer.pause(), holdMs: 20_000, end: () => bouncer.resume() },
    { name: 'PostgreSQL stopped (SIGSTOP) for 10 s', begin: async () => cluster.hang(), holdMs: 10_000, end: async () => cluster.resume() },
    // Down until every instance has seen it, as a restart that takes a few seconds is.
    { name: 'PostgreSQL restarted', begin: () => cluster.stop(), holdMs: 0, end: () => cluster.start() }
  ]
  /** Whether every instance came to say `check` within `timeoutMs`; an instance that exits meanwhile ends the wait, and the test. */
  const everyInstanceSays = async (what: string, check: DatabaseCheck, timeoutMs: number) => {
    const said = await waitFor(what, async () => exits.length > 0 || await everyInstance(check)(), timeoutMs).then(() => exits.length === 0, () => false)
    t.ok(said, what)
    t.same(exits, [], `${what}: no process exited`)
    return said
  }
  for (const fault of faults) {
    // Each fault comes while orders are being placed: some placements are cut midway.
    const before = placed()
    await waitFor(`orders placed before: ${fault.name}`, async () => placed() >= before + 3, 30_000)
    const began = performance.now()
    await fault.begin()
    if (!await everyInstanceSays(`${fault.name}: database fail on every instance`, 'fail', DETECTION_MS)) return
    const heldFor = performance.now() - began
    if (heldFor < fault.holdMs) await sleep(fault.holdMs - heldFor)
    await fault.end()
    const ended = performance.now()
    if (!await everyInstanceSays(`${fault.name}: database ok on every instance within ${RECOVERY_MS / 1000} s after it`, 'ok', RECOVERY_MS)) return
    t.comment(`${fault.name}: fail on every instance ${Math.round(heldFor)} ms after it began (at most), ok on every instance ${Math.round(performance.now() - ended)} ms after it ended`)
  }
  await orders.stop()
  const byStatus = new Map<string, number>()
  for (const { statusCode, code } of orders.answers) {
    const answer = code === undefined ? String(statusCode) : `${statusCode} ${code}`
    byStatus.set(answer, (byStatus.get(answer) ?? 0) + 1)
  }
  t.comment(`orders placed during the faults: ${JSON.stringify(Object.fromEntries(byStatus))}`)

  for (let placed = 0; placed < 2 * instances.length; placed++) {
    const response = await request(`${haproxy.url}${ORDER.url}`, {
      dispatcher: haproxy.dispatcher,
      method: 'POST',
      headers: { ...bearer(token), 'content-type': 'application/json', 'idempotency-key': randomUUID() },
      body: JSON.stringify(ORDER.payload)
    })
    const body = await response.body.text()
    t.equal(response.statusCode, 201, `an order placed after the recovery: 201 (${response.statusCode === 201 ? 'placed' : body})`)
  }
  // Placements the faults interrupted are finished or undone by the reconciliation (§10), on any instance.
  await recovered(sandbox, cluster.url, RECOVERED_MS).catch((error: unknown) => {
    // What the instances said of the placements they could not finish: the why of a wait that ran out.
    const said = instances.flatMap((instance, index) => instance.lines
      .filter((line) => Number(line.level) >= 40 && /placement|reconcil/i.test(String(line.message)))
      .slice(-5).map((line) => `instance ${index + 1}: ${JSON.stringify(line)}`))
    t.comment(said.join('\n'))
    throw error
  })
  t.pass(`every billing order goes on or is cancelled (${sandbox.billing.orders.length} billing orders)`)
  t.same(exits, [], 'no process exited')
  const lost = instances.flatMap((instance) => instance.lines.filter((line) => String(line.message).startsWith('database connection lost')))
  t.comment(`'database connection lost' lines: ${lost.length}`)
})

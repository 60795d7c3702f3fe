import t from 'tap'
import { HealthCheckRegistry, type HealthCheck } from '../../lib/health-checks.js'

const TIMEOUT_MS = 300

/** A check that never answers, and gives up only when its signal aborts; counts its signal's aborts. */
function hanging (): { check: HealthCheck, aborted: () => number } {
  let aborted = 0
  const check: HealthCheck = (signal) => new Promise((_resolve, reject) => {
    signal.addEventListener('abort', () => {
      aborted++
      reject(signal.reason)
    }, { once: true })
  })
  return { check, aborted: () => aborted }
}

t.test('checks run in parallel, each bounded by the timeout, a timeout a fail; a hung check is told to give up', async (t) => {
  const registry = new HealthCheckRegistry({ timeoutMs: TIMEOUT_MS, reuseMs: 0 })
  const database = hanging()
  const cache = hanging()
  // In parallel: the second check starts while the first still hangs, not once it has timed out.
  let databaseStarted = false
  let cacheStartedBesideIt = false
  registry.register('database', (signal) => { databaseStarted = true; return database.check(signal) })
  registry.register('cache', (signal) => { cacheStartedBesideIt = databaseStarted && database.aborted() === 0; return cache.check(signal) })
  const results = await registry.run()
  t.match(results, { database: { status: 'fail', error: 'timeout' }, cache: { status: 'fail', error: 'timeout' } })
  t.ok(cacheStartedBesideIt, 'the cache check started while the database check still hung: both within one timeout, not one after the other')
  t.equal(database.aborted() + cache.aborted(), 2, 'each hung check had its signal aborted')
})

t.test('an answering check is ok, a failing one is a fail with its class', async (t) => {
  const registry = new HealthCheckRegistry({ timeoutMs: TIMEOUT_MS, reuseMs: 0 })
  registry.register('database', async () => {})
  registry.register('cache', async () => { throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) })
  t.match(await registry.run(), { database: { status: 'ok' }, cache: { status: 'fail', error: 'connection_refused' } })
})

t.test('concurrent callers share one run; a finished run is reused for reuseMs, then checked again', async (t) => {
  const registry = new HealthCheckRegistry({ timeoutMs: TIMEOUT_MS, reuseMs: 200 })
  t.equal(registry.latest, undefined, 'no run finished yet')
  let runs = 0
  registry.register('database', async () => { runs++ })
  const [first, second] = await Promise.all([registry.run(), registry.run()])
  t.equal(runs, 1, 'two concurrent callers, one check')
  t.equal(second, first)
  t.equal(registry.reusable, first, 'the finished run is there to take without a promise')
  await registry.run()
  t.equal(runs, 1, 'reused within reuseMs')
  await new Promise((resolve) => setTimeout(resolve, 250))
  t.equal(registry.reusable, undefined, 'nothing to reuse after reuseMs')
  t.equal(registry.latest, first, 'the last finished run is still there to judge by')
  await registry.run()
  t.equal(runs, 2, 'checked again after reuseMs')
})

t.test('a name is registered once', async (t) => {
  const registry = new HealthCheckRegistry({ timeoutMs: TIMEOUT_MS, reuseMs: 0 })
  registry.register('database', async () => {})
  t.throws(() => registry.register('database', async () => {}), /already registered/)
  t.same(registry.names, ['database'])
})

import t from 'tap'
import pg from 'pg'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { PrivatePostgres } from '../helpers/private-postgres.js'
import { testEnv } from '../helpers/app.js'
import { startService } from '../helpers/service-process.js'
import { EVALUATION_INTERVAL_MS } from '../../plugins/app/monitoring/index.js'

const LOAD_MS = 12_000
// The load begins this long after the start, so that its 12 s hold the monitoring's second timed
// evaluation (the first reads every part: nothing was read before), which read PostgreSQL each time.
// PostgreSQL counts a backend's commits in pg_stat_database when it goes idle, at most once a second
// and at the latest 10 s after: by then the commits before the window are all counted.
const SETTLE_MS = 2 * EVALUATION_INTERVAL_MS - LOAD_MS / 2 - 2000
const CONNECTIONS = 20

t.test('/health under load for 12 s: the service\'s database commits at most once a second, plus one (the probe\'s own work only)', async (t) => {
  t.setTimeout(180_000)
  // A cluster of its own: no other test's traffic counts. Autovacuum is the cluster's work, not the service's.
  const cluster = await PrivatePostgres.start()
  t.teardown(() => cluster.destroy())
  const admin = new pg.Client({ connectionString: cluster.url })
  await admin.connect()
  t.teardown(() => admin.end())
  await admin.query('CREATE DATABASE portal')
  await admin.query('ALTER SYSTEM SET autovacuum = off')
  await admin.query('SELECT pg_reload_conf()')
  // Read from the `postgres` database: the reading's own transactions are not the service's database's.
  const commits = async () => Number((await admin.query<{ xact_commit: string }>("SELECT xact_commit FROM pg_stat_database WHERE datname = 'portal'")).rows[0]?.xact_commit)

  // Every feature that could touch PostgreSQL on its own runs: the subscription, the job queue, the
  // sweeps, the reconciliation, the monitoring's evaluation.
  const service = await startService(testEnv({ DATABASE_URL: cluster.url.replace(/\/postgres$/, '/portal'), CRM_EVENTS_ENABLED: 'true' }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  await sleep(SETTLE_MS)
  const before = await commits()

  const end = performance.now() + LOAD_MS
  let answered = 0
  await Promise.all(Array.from({ length: CONNECTIONS }, async () => {
    while (performance.now() < end) {
      const response = await request(`${service.url}/health`)
      await response.body.dump()
      if (response.statusCode === 200) answered++
    }
  }))
  // Its backends end with it, and count what they had not counted yet.
  service.child.kill('SIGKILL')
  await service.exit
  // A backend is counted as it ends: read until the count stops moving.
  let after = await commits()
  for (let moved = true; moved;) {
    await sleep(1000)
    const now = await commits()
    moved = now !== after
    after = now
  }
  t.ok(answered > LOAD_MS / 1000, `${answered} probes answered 200`)
  t.ok(after - before <= LOAD_MS / 1000 + 1, `${after - before} commits in ${LOAD_MS / 1000} s of /health load (at most ${LOAD_MS / 1000 + 1})`)
})

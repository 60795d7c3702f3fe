import t from 'tap'
import type pg from 'pg'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../../../helpers/app.js'
import { expectLevel } from '../../../helpers/alerts.js'

// The database measures through the business pool itself: held connections and slow queries.

t.test('database pool usage: > 80 % warns, > 95 % is critical', async (t) => {
  const app = await buildTestApp(t, { DATABASE_POOL_MAX: '10' })
  const held: pg.PoolClient[] = []
  t.teardown(() => { for (const client of held) client.release() })
  const hold = async (n: number) => { for (let i = 0; i < n; i++) held.push(await app.pg.connect()) }

  await hold(8)
  await expectLevel(t, app, 'database_pool_usage', 'ok', '8 of 10 connections lent')
  await hold(1)
  await expectLevel(t, app, 'database_pool_usage', 'warning', '9 of 10')
  await hold(1)
  const critical = await expectLevel(t, app, 'database_pool_usage', 'critical', '10 of 10')
  t.match(critical, { value: 100, priority: 'P3' }, 'a full pool is a ticket: the requests it fails page')
})

/** The queries /metrics has counted so far. */
async function countedQueries (app: FastifyInstance): Promise<number> {
  const counted = /portal_bff_db_query_duration_seconds_count\{outcome="ok"\} (\d+)/.exec((await app.inject('/metrics')).body)
  return Number(counted?.[1] ?? 24)
}

/** Slow queries enough to pass 5 % of those counted, with room for the reads the checks add. */
const slowQueriesPast5Percent = (counted: number) => Math.ceil((counted + 20) * 0.05) + 1

t.test('query duration p95: > 500 ms warns, > 2 s is critical, whichever way the query is made', async (t) => {
  const app = await buildTestApp(t)
  await app.pg.query('SELECT pg_sleep(0.52)')
  const early = await expectLevel(t, app, 'query_duration', 'ok', 'one slow query alone: too few to judge')
  t.match(early, { value: null, note: /too few samples/ })
  for (let i = 0; i < 20; i++) await app.pg.query('SELECT 1')
  await expectLevel(t, app, 'query_duration', 'ok', 'twenty fast queries beside it')
  await app.pg.query('SELECT pg_sleep(0.52)')
  // The measures read by every /health/alerts and /metrics (orders awaiting, parked events,
  // unfinished placements) add fast queries of their own, and the rules read every query the scrape
  // counted: enough slow ones to pass 5 % of them, run side by side.
  const beside = slowQueriesPast5Percent(await countedQueries(app)) - 2
  await Promise.all(Array.from({ length: beside }, () => app.pg.query('SELECT pg_sleep(0.52)')))
  await expectLevel(t, app, 'query_duration', 'warning', `${beside + 2} 520 ms queries (pool.query): the 95th percentile`)
  const slowOnItsOwnConnection = async () => {
    const client = await app.pg.connect()
    try {
      await client.query('SELECT pg_sleep(2.05)')
    } finally {
      client.release()
    }
  }
  const slow = Math.min(8, slowQueriesPast5Percent(await countedQueries(app)))
  await Promise.all(Array.from({ length: slow }, slowOnItsOwnConnection))
  await expectLevel(t, app, 'query_duration', 'critical', `${slow} 2050 ms queries (client.query): the 95th percentile`)
  await t.rejects(app.pg.query('SELECT * FROM no_such_table'), 'a failing query')
  t.match((await app.inject('/metrics')).body, /portal_bff_db_query_duration_seconds_count\{outcome="error"\} 1/, 'is counted as an error')
})

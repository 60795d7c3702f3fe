import t from 'tap'
import { Reconciliation } from '../../../../plugins/app/orders/reconciliation.js'
import { placementTestApp } from '../../../helpers/placement.js'

t.test('a reconciliation round runs each task on one instance at a time; a failing task leaves the others to run', async (t) => {
  const { app } = await placementTestApp(t)
  const runs: string[] = []
  const instance = (holder: string) => new Reconciliation({
    pool: app.pg.pool,
    intervalMs: 1000,
    holder,
    log: app.log,
    tasks: [
      { name: 'test-failing', run: async () => { throw new Error('the CRM is away') } },
      { name: 'test-counted', run: async () => { runs.push(holder) } }
    ]
  })
  const [one, two] = [instance('one'), instance('two')]
  await Promise.all([one.runOnce(), two.runOnce(), one.runOnce()])
  t.equal(runs.length, 1, 'one run among the instances')
  await Promise.all([one.runOnce(), two.runOnce()])
  t.equal(runs.length, 1, 'none again within the interval')
  await new Promise((resolve) => setTimeout(resolve, 1000))
  await Promise.all([two.runOnce(), one.runOnce()])
  t.equal(runs.length, 2, 'the next interval, one more')
  const { rows } = await app.pg.pool.query("SELECT task, holder FROM reconciliation_leases WHERE task LIKE 'test-%' ORDER BY task")
  t.match(rows, [{ task: 'test-counted', holder: runs[1] }, { task: 'test-failing' }])
})

t.test('stopping ends the round under way between two pieces of work', async (t) => {
  const { app } = await placementTestApp(t)
  let pieces = 0
  const reconciliation = new Reconciliation({
    pool: app.pg.pool,
    intervalMs: 1000,
    holder: 'stopping',
    log: app.log,
    tasks: [{
      name: 'test-endless',
      run: async (signal) => {
        while (!signal.aborted) {
          pieces++
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      }
    }]
  })
  const round = reconciliation.runOnce()
  await new Promise((resolve) => setTimeout(resolve, 200))
  await reconciliation.stop()
  await round
  const done = pieces
  t.ok(done > 0, 'it was working')
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.equal(pieces, done, 'and stopped')
})

import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { SlidingWindow } from '../../lib/sliding-window.js'

function sortedP95 (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.ceil(0.95 * sorted.length) - 1]!
}

t.test('the p95, average and failure rate are those of the samples, whatever their order and repeats', async (t) => {
  for (const size of [1, 2, 19, 20, 21, 1000, 5003]) {
    const window = new SlidingWindow()
    const values = Array.from({ length: size }, (_, i) => (i % 7 === 0 ? 5 : Math.round(Math.random() * 3000)))
    values.forEach((value, i) => window.record(value, i % 4 === 0))
    const summary = window.summary()
    t.equal(summary.p95, sortedP95(values), `p95 of ${size}`)
    t.equal(summary.count, size)
    t.equal(summary.failures, Math.ceil(size / 4))
    t.ok(Math.abs(summary.average! - values.reduce((sum, value) => sum + value, 0) / size) < 1e-9, `average of ${size}`)
    t.same(window.summary(), summary, 'reading it changes nothing')
  }
})

t.test('nothing recorded: no figures', async (t) => {
  t.same(new SlidingWindow().summary(), { count: 0, failures: 0, failureRate: null, average: null, p95: null })
})

t.test('at the cap, the oldest samples give way to the newest', async (t) => {
  const window = new SlidingWindow(300_000, 100)
  for (let i = 1; i <= 250; i++) window.record(i, i <= 200)
  const summary = window.summary()
  t.equal(summary.count, 100)
  t.equal(summary.failures, 50, 'only samples 151-250 remain')
  t.equal(summary.average, 200.5)
  t.equal(summary.p95, 245)
})

t.test('samples older than the window are left out', async (t) => {
  const window = new SlidingWindow(200)
  window.record(1000, true)
  await sleep(250)
  window.record(10)
  t.match(window.summary(), { count: 1, failures: 0, average: 10, p95: 10 })
  t.equal(window.count(), 1, 'count() agrees')
  await sleep(250)
  t.match(window.summary(), { count: 0, p95: null })
})

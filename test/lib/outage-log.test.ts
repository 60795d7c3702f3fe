import t from 'tap'
import { OutageLog } from '../../lib/outage-log.js'

t.test('an outage is one line when it starts and one when it ends, however many errors between', async (t) => {
  const lines: Array<{ level: string, details: object, message: string }> = []
  const log = {
    warn: (details: object, message: string) => lines.push({ level: 'warn', details, message }),
    info: (details: object, message: string) => lines.push({ level: 'info', details, message })
  }
  const outage = new OutageLog(log, 'the queue: Redis')
  outage.recovered()
  t.same(lines, [], 'nothing to say while nothing failed')
  const first = new Error('connect ECONNREFUSED')
  for (let i = 0; i < 42; i++) outage.error(i === 0 ? first : new Error('again'))
  t.equal(outage.errors, 42)
  t.same(lines, [{ level: 'warn', details: { err: first }, message: 'the queue: Redis failing; further errors are counted until it recovers' }])
  outage.recovered()
  outage.recovered()
  t.same(lines.slice(1), [{ level: 'info', details: { errors: 42 }, message: 'the queue: Redis recovered' }], 'the end, once, with the count')
  outage.error(new Error('the next outage'))
  t.equal(lines.length, 3, 'a new outage is a new line')
})

import t from 'tap'
import { OutageLog } from '../../lib/outage-log.js'

type Line = { level: string, details: object, message: string }

function recorder () {
  const lines: Line[] = []
  const at = (level: string) => (details: object, message: string) => { lines.push({ level, details, message }) }
  return { lines, log: { error: at('error'), warn: at('warn'), info: at('info') } }
}

t.test('an outage is one line when it starts and one when it ends, however many errors between', async (t) => {
  const { lines, log } = recorder()
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

t.test('the opening line may be an error and say what the service does meanwhile', async (t) => {
  const { lines, log } = recorder()
  const outage = new OutageLog(log, 'token blacklist: Redis', { level: 'error', consequence: 'token checks refused' })
  outage.error(new Error('down'))
  outage.error(new Error('down'))
  t.match(lines, [{ level: 'error', message: 'token blacklist: Redis failing (token checks refused); further errors are counted until it recovers' }])
})

import t from 'tap'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { LazyChildLogger } from '../../lib/logger.js'

function capture () {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString().trim())
      done()
    }
  })
  const root = pino({ level: 'info', base: { service: 'portal-bff' }, timestamp: false, redact: { paths: ['password', '*.password'], censor: '[redacted]' } }, stream)
  return { root, lines }
}

t.test('a request logger writes the line its pino child would write, without making the child', async (t) => {
  const { root, lines } = capture()
  const fields = { duration: 3, path: '/api/invoices', method: 'GET', statusCode: 200, password: 'hunter2' }
  root.child({ correlationId: 'abc' }, { level: 'info' }).info(fields, 'request completed')
  const lazy = new LazyChildLogger(root, { correlationId: 'abc' }, { level: 'info' })
  lazy.info(fields, 'request completed')
  lazy.debug(fields, 'below the level')
  t.equal(lines.length, 2, 'the level is the child\'s: no debug line')
  t.equal(lines[1], lines[0], 'the same line, bindings first, secrets redacted')
  t.notMatch(lines[1], 'hunter2')
})

t.test('a request logger with its own level, serializers, or a line of an error, goes through the child', async (t) => {
  const { root, lines } = capture()
  new LazyChildLogger(root, { correlationId: 'quiet' }, { level: 'warn' }).info({ statusCode: 200 }, 'not written')
  t.equal(lines.length, 0, 'a route at warn writes no info line')
  new LazyChildLogger(root, { correlationId: 'own' }, { serializers: { statusCode: () => 'serialized' } }).info({ statusCode: 200 }, 'serialized')
  t.match(JSON.parse(lines[0]!), { correlationId: 'own', statusCode: 'serialized' }, 'the route\'s serializers apply')
  new LazyChildLogger(root, { correlationId: 'failed' }, {}).error(new Error('boom'))
  t.match(JSON.parse(lines[1]!), { correlationId: 'failed', err: { message: 'boom' } }, 'an error is logged as pino logs one')
})

import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { pino, symbols } from 'pino'
import { LazyChildLogger, createLogger, stringifyPrimitivesDirectly } from '../../lib/logger.js'
import { tempDir } from '../helpers/made.js'
import { waitFor } from '../helpers/processes.js'

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

t.test('fields that hold no path are written as the redactor writes them, and objects still go through it', async (t) => {
  const paths = ['password', 'req.headers.authorization', '*.password', '*.token']
  const redactor = (lines: string[]) => pino({ level: 'info', base: null, timestamp: false, redact: { paths, censor: '[redacted]' } }, new Writable({
    write (chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString().trim())
      done()
    }
  }))
  const [plainLines, shortLines]: [string[], string[]] = [[], []]
  const [plain, short] = [redactor(plainLines), redactor(shortLines)]
  const anyField = () => (short as unknown as Record<symbol, Record<symbol, unknown>>)[symbols.stringifiersSym]![symbols.wildcardFirstSym]
  const before = anyField()
  stringifyPrimitivesDirectly(short)
  t.not(anyField(), before, 'the redactor of any field is replaced')
  const fields = {
    duration: 3,
    ratio: 0.25,
    infinite: Infinity,
    notANumber: NaN,
    ok: true,
    path: '/api/"quoted"\\path\n\u2028é',
    nothing: null,
    missing: undefined,
    list: [1, 'two', { token: 'list-secret' }],
    nested: { password: 'nested-secret', kept: 'visible' },
    password: 'top-secret',
    req: { headers: { authorization: 'Bearer header-secret', accept: 'json' } }
  }
  for (const logger of [plain, short]) {
    logger.info(fields, 'a line')
    logger.child({ correlationId: 'abc', attempt: 2, nested: { token: 'bound-secret' } }).warn({ statusCode: 503 }, 'a child\'s line')
  }
  t.same(shortLines, plainLines, 'the same lines')
  for (const secret of ['nested-secret', 'top-secret', 'header-secret', 'bound-secret']) t.notMatch(shortLines.join('\n'), secret)
  t.match(JSON.parse(shortLines[0]!), { duration: 3, path: fields.path, nested: { password: '[redacted]', kept: 'visible' } })
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

t.test('fields added to every line (the span ids) stay on their own line: none carries an earlier line\'s fields', async (t) => {
  const logDir = tempDir('logger-line-fields')
  let ids: { traceId: string, spanId: string } | undefined
  const logger = createLogger({ level: 'info', service: 'portal-bff', logDir, stdout: false, lineFields: () => ids === undefined ? undefined : { ...ids } })
  await logger.ready
  logger.system.info({ statusCode: 503, password: 'hunter2' }, 'outside a span')
  ids = { traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) }
  logger.system.info({ route: '/api/invoices' }, 'in a span')
  ids = undefined
  logger.system.info('outside again')
  logger.flush()
  // The file is written asynchronously: a write still under way may land after a later flush's.
  const read = () => readFileSync(join(logDir, 'combined.log'), 'utf8').trim().split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as Record<string, unknown>)
  await waitFor('the three lines', async () => read().length === 3)
  const line = (message: string) => read().find((written) => written.message === message)!
  t.match(line('outside a span'), { statusCode: 503, password: '[redacted]' })
  t.notOk('traceId' in line('outside a span'), 'no ids outside a span')
  t.match(line('in a span'), { route: '/api/invoices', traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) })
  t.notOk('statusCode' in line('in a span'), 'not the line before\'s fields')
  t.same(Object.keys(line('outside again')).filter((key) => !['level', 'timestamp', 'service', 'correlationId', 'message'].includes(key)), [], 'the third line: its own fields only')
})

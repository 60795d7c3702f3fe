import t from 'tap'
import { existsSync, readFileSync, renameSync, rmSync, truncateSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { buildTestApp, ensureTestDatabase, tempDir, testEnv } from '../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { waitFor } from '../helpers/processes.js'
import { startService } from '../helpers/service-process.js'

type LogLine = Record<string, unknown>

function readLog (dir: string, file: string): { text: string, lines: LogLine[] } {
  const text = readFileSync(join(dir, file), 'utf8')
  return { text, lines: text.split('\n').filter(Boolean).map((line) => JSON.parse(line) as LogLine) }
}

t.test('log lines carry the contract fields, redact secrets and split by level', async (t) => {
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { LOG_DIR: logDir })

  const traced = await app.inject({ method: 'GET', url: '/no-such-route?token=abc', headers: { 'x-correlation-id': 'trace-123:a.b_c' } })
  t.equal(traced.headers['x-correlation-id'], 'trace-123:a.b_c', 'a valid correlation id round-trips')
  t.equal(traced.json().correlationId, 'trace-123:a.b_c', 'and is in the error body')

  const longest = 'x'.repeat(128)
  t.equal((await app.inject({ method: 'GET', url: '/health/live', headers: { 'x-correlation-id': longest } })).headers['x-correlation-id'], longest, '128 characters are kept')
  for (const bad of ['x'.repeat(129), 'x'.repeat(10 * 1024), 'has spaces', 'semi;colon', 'system', 'SYSTEM', 'order:801000000000001AAA']) {
    const response = await app.inject({ method: 'GET', url: '/health/live', headers: { 'x-correlation-id': bad } })
    t.match(response.headers['x-correlation-id'], /^[0-9a-f-]{36}$/, `${bad.slice(0, 20)}: an invalid or reserved one is replaced by a new UUID`)
  }

  await app.inject({
    method: 'POST',
    url: '/login-attempt',
    headers: { authorization: 'Bearer very-secret-token', cookie: 'session=cookie-secret' },
    payload: { email: 'jane@example.com', password: 'hunter2-password' }
  })
  app.log.info({ password: 'hunter2-password', headers: { authorization: 'Bearer very-secret-token' }, nested: { secret: 'nested-secret' } }, 'an object with secrets')
  app.log.warn('a warning line')
  app.log.error('an error line')
  await app.close()

  const combined = readLog(logDir, 'combined.log')
  const completion = combined.lines.find((line) => line.correlationId === 'trace-123:a.b_c')
  t.ok(completion, 'the request has a completion line')
  t.match(completion, {
    level: 30,
    service: 'portal-bff',
    correlationId: 'trace-123:a.b_c',
    message: 'request completed',
    path: '/no-such-route',
    method: 'GET',
    statusCode: 404
  })
  t.match(completion?.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'ISO 8601 UTC timestamp')
  t.ok(Number.isInteger(completion?.duration), 'duration is an integer number of ms')
  t.notOk('slow' in (completion ?? {}), 'a fast request is not marked slow')
  t.equal(combined.lines.filter((line) => line.correlationId === 'trace-123:a.b_c').length, 1, 'one line per request')
  t.ok(combined.lines.every((line) => typeof line.correlationId === 'string' && typeof line.service === 'string' && typeof line.message === 'string'), 'every line has service, correlationId and message')

  for (const secret of ['very-secret-token', 'cookie-secret', 'hunter2-password', 'nested-secret', 'token=abc']) {
    t.notMatch(combined.text, secret, `${secret} is in no log line`)
  }

  const errors = readLog(logDir, 'error.log')
  t.ok(errors.lines.length >= 1, 'error.log has the error line')
  t.ok(errors.lines.every((line) => Number(line.level) >= 50), 'error.log holds only level >= 50')
  t.ok(combined.lines.some((line) => line.level === 40) && combined.lines.some((line) => line.level === 50), 'combined.log holds every level')
})

t.test('a request of 2000 ms or more is marked slow', async (t) => {
  const logDir = tempDir('logs')
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { LOG_DIR: logDir, HEALTH_CHECK_TIMEOUT_MS: '2000', REDIS_COMMAND_TIMEOUT_MS: '5000' })
  await sleep(1000)
  redis.hang()
  const response = await app.inject({ method: 'GET', url: '/health', headers: { 'x-correlation-id': 'slow-probe' } })
  t.equal(response.statusCode, 503)
  redis.resume()
  await waitFor('the slow line', async () => readLog(logDir, 'combined.log').lines.some((line) => line.correlationId === 'slow-probe'))
  const line = readLog(logDir, 'combined.log').lines.find((line) => line.correlationId === 'slow-probe')
  t.match(line, { slow: true, level: 40, path: '/health', statusCode: 503 })
  t.ok(Number(line?.duration) >= 2000)
})

t.test('the log files can be rotated by copying and truncating them (logrotate copytruncate)', async (t) => {
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { LOG_DIR: logDir })
  const logged = (correlationId: string) => async () => readLog(logDir, 'combined.log').lines.some((line) => line.correlationId === correlationId)

  await app.inject({ url: '/no-such-route', headers: { 'x-correlation-id': 'before-rotation' } })
  await waitFor('the line before rotation', logged('before-rotation'))
  truncateSync(join(logDir, 'combined.log'), 0)
  await app.inject({ url: '/no-such-route', headers: { 'x-correlation-id': 'after-rotation' } })
  await waitFor('the line after rotation', logged('after-rotation'))

  const { text, lines } = readLog(logDir, 'combined.log')
  t.notOk(text.includes('\0'), 'the file opened for appending goes on at its new end: no hole of zero bytes where the old lines were')
  t.notOk(lines.some((line) => line.correlationId === 'before-rotation'), 'only what came after')
})

t.test('SIGHUP reopens the log files by name (logrotate renaming them): no line lost, the process goes on', async (t) => {
  await ensureTestDatabase()
  const logDir = tempDir('logs')
  const service = await startService(testEnv({ LOG_DIR: logDir }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  const get = async (correlationId: string) => {
    const response = await request(`${service.url}/no-such-route`, { headers: { 'x-correlation-id': correlationId } })
    await response.body.dump()
  }
  const logged = (file: string, correlationId: string) => readLog(logDir, file).lines.some((line) => line.correlationId === correlationId)

  await get('before-rotation')
  await waitFor('the line before rotation', async () => logged('combined.log', 'before-rotation'))
  renameSync(join(logDir, 'combined.log'), join(logDir, 'combined.log.1'))
  renameSync(join(logDir, 'error.log'), join(logDir, 'error.log.1'))
  service.child.kill('SIGHUP')
  await waitFor('new files under the old names', async () => existsSync(join(logDir, 'combined.log')) && existsSync(join(logDir, 'error.log')))
  await get('after-rotation')
  await waitFor('the line after rotation', async () => logged('combined.log', 'after-rotation'))

  t.ok(logged('combined.log.1', 'before-rotation'), 'the rotated file keeps what came before')
  t.notOk(logged('combined.log.1', 'after-rotation'), 'and nothing after')
  t.notOk(logged('combined.log', 'before-rotation'), 'the new file has only what came after')
  t.ok(readLog(logDir, 'combined.log').lines.some((line) => line.message === 'log files reopened (SIGHUP)'), 'the reopening is logged')
  t.equal(service.child.exitCode, null, 'SIGHUP did not end the process')
  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0)
})

t.test('a log file that cannot be reopened does not end the service', async (t) => {
  await ensureTestDatabase()
  const logDir = tempDir('logs')
  const service = await startService(testEnv({ LOG_DIR: logDir }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  rmSync(logDir, { recursive: true })
  service.child.kill('SIGHUP')
  await waitFor('the failure on stderr', async () => service.stderr().includes('log file combined.log unavailable: ENOENT'))
  const response = await request(`${service.url}/health/live`)
  t.equal(response.statusCode, 200, 'the service still answers')
  await response.body.dump()
  t.ok(service.lines.some((line) => line.message === 'log files reopened (SIGHUP)'), 'stdout still gets the lines')
  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0)
})

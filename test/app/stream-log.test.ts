import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { SLOW_REQUEST_MS } from '../../lib/request-log.js'
import { buildTestApp } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'
import { SseClient } from '../helpers/sse.js'
import { bearer, login } from '../helpers/tokens.js'

interface LogLine { level: number, message: string, path?: string, [field: string]: unknown }

function completions (logDir: string, path: string): LogLine[] {
  return readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter(Boolean)
    .map((line) => JSON.parse(line) as LogLine)
    .filter((line) => line.message === 'request completed' && line.path === path)
}

// A stream its client left writes no completion line: its response never finishes.
t.test('an SSE stream that ends normally (logout, shutdown), however long it lasted, completes at info without slow: its length is its client\'s', async (t) => {
  const app = await buildTestApp(t)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const logDir = app.config.LOG_DIR

  const token = await login(app)
  const loggedOut = await SseClient.open(`${url}/api/events`, bearer(token))
  t.equal(loggedOut.status, 200)
  const shutDown = await SseClient.open(`${url}/api/events`, bearer(await login(app)))
  await sleep(SLOW_REQUEST_MS + 200)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 204)
  await waitFor('the stream of the logged-out token ended', async () => loggedOut.ended)
  await app.close()
  t.ok(shutDown.ended, 'the other stream ended with the shutdown')

  const lines = completions(logDir, '/api/events')
  t.equal(lines.length, 2, 'each stream has its completion line')
  for (const line of lines) {
    t.match(line, { level: 30, statusCode: 200 }, 'at info')
    t.ok(Number(line.duration) >= SLOW_REQUEST_MS, `with its duration (${String(line.duration)} ms)`)
    t.notOk('slow' in line, 'not slow')
  }
})

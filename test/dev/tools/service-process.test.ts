import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { startService } from '../../../dev/tools/service-process.js'
import { tempDir } from '../../helpers/made.js'
import { childReport, waitFor } from '../../helpers/processes.js'

/** A script standing for a service: writes a line on each stream, then `then`. */
function script (then: string): string {
  const path = join(tempDir('service-process'), 'entry.mjs')
  writeFileSync(path, `console.log(JSON.stringify({ message: 'reading the settings' }))\nconsole.error('REDIS_URL: not a redis:// URL')\n${then}\n`)
  return path
}

t.test('a service that never listens fails with its last output, both streams', async (t) => {
  const start = startService({ entry: script('setInterval(() => {}, 1000)'), env: {} }, 1500)
  await t.rejects(start, { message: /^service did not listen within 1500 ms; its last output:\nstdout: \{"message":"reading the settings"\}\nstderr: REDIS_URL: not a redis:\/\/ URL$/ })
})

t.test('a service that exits before it listens says so, with its last output', async (t) => {
  const start = startService({ entry: script('process.exit(1)'), env: {} }, 30_000)
  await t.rejects(start, { message: /^service exited with 1 before it listened; its last output:\n[^]*stderr: REDIS_URL: not a redis:\/\/ URL/ })
})

t.test('a child that does not come up: the wait names the last try, and the child its state and output', async (t) => {
  const child = spawn(process.execPath, ['-e', "console.log('listening soon'); console.error('bind: address in use'); setInterval(() => {}, 1000)"], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => child.kill('SIGKILL'))
  const report = childReport(child, 'planted-server')
  const waiting = waitFor('planted-server on 1', async () => { throw new Error('connect ECONNREFUSED 127.0.0.1:1') }, 1000, report)
  await t.rejects(waiting, { message: /^Timed out waiting for planted-server on 1 after 1000 ms \(the last try: connect ECONNREFUSED 127\.0\.0\.1:1\); planted-server \(pid \d+\) is running; its last output:\n(stdout: listening soon\nstderr: bind: address in use|stderr: bind: address in use\nstdout: listening soon)$/ })
})

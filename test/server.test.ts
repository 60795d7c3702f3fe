import t from 'tap'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { ensureTestDatabase, tempDir, testEnv } from './helpers/app.js'
import { waitFor } from './helpers/processes.js'
import { runServer, startService } from './helpers/service-process.js'

t.test('without upstream settings outside production, the sandbox is embedded and said so once', async (t) => {
  await ensureTestDatabase()
  const service = await startService(testEnv())
  t.teardown(() => { service.child.kill('SIGKILL') })
  const warnings = service.lines.filter((line) => String(line.message).startsWith('UPSTREAM SANDBOX IN USE'))
  t.equal(warnings.length, 1, 'one loud warning')
  t.equal(warnings[0]?.level, 40)
  t.match(warnings[0]?.message, /BILLING_API_URL.*TELECOM_API_KEY/)
  t.notMatch(JSON.stringify(service.lines), /PRIVATE KEY|sandbox-billing-secret/, 'no sandbox secret is logged')
  // Written just after the listening line the start waits for.
  await waitFor('the runtime named', async () => service.lines.some((line) => line.message === `running on Node.js ${process.versions.node}` && line.nodeVersion === process.version))
  t.pass('the start names the runtime it runs on')
  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0, 'and it shuts down cleanly with its sandbox')
})

t.test('a log file that cannot be opened at start: the start fails with one line, exit 1', async (t) => {
  const logDir = tempDir('logs')
  mkdirSync(join(logDir, 'combined.log'))
  const server = runServer(testEnv({ LOG_DIR: logDir }))
  t.teardown(() => { server.child.kill('SIGKILL') })
  t.equal(await server.exit, 1)
  t.match(server.stderr(), /^Startup failed: EISDIR: .*combined\.log/)
  t.equal(server.stderr().trim().split('\n').length, 1, 'one line')
})

t.test('a port already in use: the start fails with one line naming HOST and PORT, exit 1', async (t) => {
  await ensureTestDatabase()
  const taken = createServer()
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => taken.close(resolve)))
  const { port } = taken.address() as AddressInfo
  const server = runServer(testEnv({ HOST: '127.0.0.1', PORT: String(port) }))
  t.teardown(() => { server.child.kill('SIGKILL') })
  t.equal(await server.exit, 1)
  t.match(server.stderr(), new RegExp(`^Startup failed: cannot listen on 127\\.0\\.0\\.1:${port} \\(EADDRINUSE\\); check HOST and PORT$`, 'm'))
  t.notMatch(server.stderr(), /at .*\.ts:\d+/, 'no stack trace')
})

import t from 'tap'
import { ensureTestDatabase, testEnv } from './helpers/app.js'
import { freePort } from './helpers/ports.js'
import { runServer } from './helpers/service-process.js'

t.test('PostgreSQL unreachable at start: the start fails with one line, exit 1', async (t) => {
  const closedPort = await freePort()
  const started = performance.now()
  const server = runServer(testEnv({ DATABASE_URL: `postgres://postgres@127.0.0.1:${closedPort}/postgres` }))
  t.teardown(() => { server.child.kill('SIGKILL') })
  t.equal(await server.exit, 1)
  t.match(server.stderr(), /^Startup failed: /m)
  t.notMatch(server.stderr(), /at .*\.ts:\d+/, 'no stack trace')
  t.ok(performance.now() - started < 15_000, `gave up in ${Math.round(performance.now() - started)} ms`)
})

t.test('Redis unreachable at start: the start fails once the plugin timeout passes, exit 1', async (t) => {
  await ensureTestDatabase()
  const closedPort = await freePort()
  const server = runServer(testEnv({ REDIS_URL: `redis://127.0.0.1:${closedPort}` }))
  t.teardown(() => { server.child.kill('SIGKILL') })
  t.equal(await server.exit, 1)
  t.match(server.stderr(), /^Startup failed: /m)
})

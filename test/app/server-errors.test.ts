import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, tempDir } from '../helpers/app.js'
import { waitFor } from '../helpers/processes.js'

t.test('a connection the listening server fails to accept is logged, and the server serves on', async (t) => {
  const logDir = tempDir('logs')
  const app = await buildTestApp(t, { LOG_DIR: logDir })
  await app.listen({ port: 0, host: '127.0.0.1' })
  // What Node's server emits when accept() fails: unheard, it would end this process.
  app.server.emit('error', Object.assign(new Error('accept EMFILE'), { code: 'EMFILE', syscall: 'accept' }))
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening on TCP')
  const response = await fetch(`http://127.0.0.1:${address.port}/health/live`)
  t.equal(response.status, 200, 'still serving')
  const logged = () => readFileSync(join(logDir, 'combined.log'), 'utf8').split('\n').filter((line) => line.includes('could not be accepted'))
  await waitFor('the line in the log', async () => logged().length === 1)
  t.match(JSON.parse(logged()[0]!), { level: 50, err: { code: 'EMFILE' } })
})

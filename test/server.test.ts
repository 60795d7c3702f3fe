import t from 'tap'
import { ensureTestDatabase, testEnv } from './helpers/app.js'
import { startService } from './helpers/service-process.js'

t.test('without upstream settings outside production, the sandbox is embedded and said so once', async (t) => {
  await ensureTestDatabase()
  const service = await startService(testEnv())
  t.teardown(() => { service.child.kill('SIGKILL') })
  const warnings = service.lines.filter((line) => String(line.message).startsWith('UPSTREAM SANDBOX IN USE'))
  t.equal(warnings.length, 1, 'one loud warning')
  t.equal(warnings[0]?.level, 40)
  t.match(warnings[0]?.message, /BILLING_API_URL.*TELECOM_API_KEY/)
  t.notMatch(JSON.stringify(service.lines), /PRIVATE KEY|sandbox-billing-secret/, 'no sandbox secret is logged')
  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0, 'and it shuts down cleanly with its sandbox')
})

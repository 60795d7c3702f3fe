import t from 'tap'
import { testEnv, testSchemaUrl } from '../helpers/app.js'
import { freePort } from '../helpers/ports.js'
import { startService } from '../helpers/service-process.js'

t.test('npm start points the service at the sandbox\'s identity provider, and keeps password sign-in beside it', async (t) => {
  const port = await freePort()
  const service = await startService(testEnv({ NODE_ENV: 'development', DATABASE_URL: await testSchemaUrl(t), PORT: String(port) }))
  t.teardown(() => { service.child.kill('SIGKILL') })
  const issuer = String(service.lines.find((line) => line.identityProvider !== undefined)?.identityProvider)
  t.match(issuer, /^http:\/\/127\.0\.0\.1:\d+$/, 'the start names the provider')
  t.same(await (await fetch(`${service.url}/auth/sign-in-methods`)).json(), { password: true, oidc: true }, 'the page offers both ways')

  const login = await fetch(`http://localhost:${port}/auth/oidc/login?returnTo=%2Fportal%2F`, { redirect: 'manual' })
  t.equal(login.status, 302)
  const authorization = new URL(login.headers.get('location')!)
  t.equal(authorization.origin, issuer, 'to the sandbox\'s provider')
  t.equal(authorization.searchParams.get('redirect_uri'), `http://localhost:${port}/auth/oidc/callback`)
  const atProvider = await fetch(authorization, { redirect: 'manual' })
  t.equal(atProvider.status, 303, 'which knows the service at this address: to its sign-in page')
  const page = await fetch(new URL(atProvider.headers.get('location')!, authorization), { headers: { cookie: atProvider.headers.getSetCookie().map((line) => line.split(';')[0]).join('; ') } })
  t.match(await page.text(), /<input name="login" type="email"/, 'its sign-in form')
  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0, 'and it stops cleanly, the provider with it')
})

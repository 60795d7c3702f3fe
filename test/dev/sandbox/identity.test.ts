import t from 'tap'
import { SANDBOX_TOTP_SECRET, startSandboxIdentityProvider, totpCode } from '../../../dev/sandbox/identity.js'
import { buildTestApp } from '../../helpers/app.js'
import { CookieJar, PORTAL_ORIGIN } from '../../helpers/oidc-provider.js'
import { SESSION_COOKIE } from '../../../plugins/app/access/sessions.js'
import { LOGIN_COOKIE } from '../../../plugins/app/access/oidc/routes.js'

const cookieOf = (setCookie: string | string[] | undefined, name: string) =>
  [setCookie ?? []].flat().find((line) => line.startsWith(`${name}=`))?.split(';')[0]

/** A browser at the provider: follows its redirects until a page, or until it is sent back to the portal. */
class ProviderBrowser {
  readonly jar = new CookieJar()

  async go (url: string, form?: Record<string, string>): Promise<{ url: string, page?: string, back?: URL }> {
    for (let hop = 0; hop < 20; hop++) {
      const response = await fetch(url, {
        method: form === undefined ? 'GET' : 'POST',
        redirect: 'manual',
        headers: { cookie: this.jar.header, ...(form === undefined ? {} : { 'content-type': 'application/x-www-form-urlencoded' }) },
        body: form === undefined ? undefined : new URLSearchParams(form)
      })
      this.jar.take(response.headers.getSetCookie())
      form = undefined
      const location = response.headers.get('location')
      if (location === null) return { url, page: await response.text() }
      const next = new URL(location, url)
      if (next.origin === PORTAL_ORIGIN) return { url, back: next }
      url = next.href
    }
    throw new Error('redirected too often')
  }
}

const actionOf = (page: string, base: string) => new URL(/<form[^>]* action="([^"]+)"/.exec(page)![1]!, base).href

t.test('the sandbox provider signs billing clients in as WHMCS does: its form, a TOTP step for two-factor users, consent, end-session', async (t) => {
  const provider = await startSandboxIdentityProvider({ portalOrigins: [PORTAL_ORIGIN] })
  t.teardown(() => provider.close())
  t.match(provider.accounts.find((account) => account.email === 'tom@example.com'), { totpSecret: SANDBOX_TOTP_SECRET }, 'Tom has two-factor authentication, as in billing')
  const app = await buildTestApp(t, { ...provider.settings, PUBLIC_ORIGIN: PORTAL_ORIGIN })
  const login = await app.inject({ method: 'GET', url: '/auth/oidc/login?returnTo=%2Forders' })
  const loginCookie = cookieOf(login.headers['set-cookie'], LOGIN_COOKIE)!

  const browser = new ProviderBrowser()
  const signInPage = await browser.go(login.headers.location!)
  t.match(signInPage.page, /<input name="login" type="email"[^>]*>.*<input name="password" type="password"/s, 'its sign-in form: email and password')
  const wrong = await browser.go(actionOf(signInPage.page!, signInPage.url), { login: 'tom@example.com', password: 'wrong' })
  t.match(wrong.page, 'Invalid email or password')
  const codePage = await browser.go(actionOf(wrong.page!, wrong.url), { login: 'tom@example.com', password: 'second-factor' })
  t.match(codePage.page, /Two-factor authentication.*autocomplete="one-time-code"/s, 'the right password of a two-factor user asks for a code')
  const wrongCode = String((Number(totpCode(SANDBOX_TOTP_SECRET)) + 500_000) % 1_000_000).padStart(6, '0')
  const refused = await browser.go(actionOf(codePage.page!, codePage.url), { code: wrongCode })
  t.match(refused.page, 'That code is not valid', 'a wrong code is refused')
  const consent = await browser.go(actionOf(refused.page!, refused.url), { code: totpCode(SANDBOX_TOTP_SECRET) })
  t.match(consent.page, /Authorize access.*asks to see your name and email/s, 'the first sign-in to the portal asks for consent')
  const { back } = await browser.go(actionOf(consent.page!, consent.url), { prompt: 'consent' })
  t.equal(`${back!.origin}${back!.pathname}`, `${PORTAL_ORIGIN}/auth/oidc/callback`)

  const callback = await app.inject({ method: 'GET', url: `${back!.pathname}${back!.search}`, headers: { cookie: loginCookie } })
  t.equal(callback.headers.location, '/orders')
  const session = cookieOf(callback.headers['set-cookie'], SESSION_COOKIE)!
  t.match((await app.inject({ method: 'GET', url: '/auth/session', headers: { cookie: session } })).json(), { clientId: 4, email: 'tom@example.com', name: 'Tom Guarded', signIn: 'oidc' }, 'the two-factor user\'s billing client, by verified email')

  // Signed in at the provider already, and consent given: the next sign-in comes straight back.
  const again = await app.inject({ method: 'GET', url: '/auth/oidc/login?returnTo=%2F' })
  t.ok((await browser.go(again.headers.location!)).back, 'no form the second time')

  const logout = await app.inject({ method: 'POST', url: '/auth/logout', headers: { cookie: session, 'x-csrf': '1' } })
  const endSession = await browser.go(logout.json().logoutUrl)
  t.match(endSession.page, /Sign out of the billing system\?.*id="op.logoutForm".*id="sign-out"/s, 'its end-session page asks to confirm')
  const xsrf = /name="xsrf" value="([^"]+)"/.exec(endSession.page!)![1]!
  const signedOut = await browser.go(actionOf(endSession.page!, endSession.url), { xsrf, logout: 'yes' })
  t.equal(signedOut.back?.href, `${PORTAL_ORIGIN}/`, 'back to the portal')
  const afterwards = await app.inject({ method: 'GET', url: '/auth/oidc/login?returnTo=%2F' })
  t.match((await browser.go(afterwards.headers.location!)).page, 'name="password"', 'signed out at the provider: its form again')
})

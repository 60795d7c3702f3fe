import { createServer, type Server } from 'node:http'
import { randomUUID } from 'node:crypto'
import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose'
import { createIdentityProvider, portalClient } from '../../dev/sandbox/identity.js'
import { BACKCHANNEL_LOGOUT_EVENT } from '../../integrations/oidc/provider.js'
import { freePort } from './ports.js'

export const OIDC_CLIENT = { id: 'portal-bff', secret: 'a-client-secret-of-the-tests-provider' }
/** Where the provider sends browsers back: the service as PUBLIC_ORIGIN names it. */
export const PORTAL_ORIGIN = 'https://portal.test'

type SigningKey = Parameters<SignJWT['sign']>[0]

/** Every person's password at the tests' provider. */
const PASSWORD = 'a-password'

export interface Person { email: string, name: string, emailVerified?: boolean }

/** People the tests' provider knows, by account id (its `sub`). */
export const PEOPLE: Record<string, Person> = {
  jane: { email: 'jane@example.com', name: 'Jane at the provider' },
  // Owns billing client 2 and manages client 3.
  john: { email: 'john@example.com', name: 'John at the provider' },
  stranger: { email: 'stranger@example.com', name: 'Someone billing does not know' },
  unverified: { email: 'jane@example.com', name: 'Not Jane', emailVerified: false }
}

export interface TestProvider {
  issuer: string
  /** The settings that point the service at it. */
  settings: Record<string, string>
  /** A logout token signed with the provider's key, or with `key` instead; `claims` replace or (undefined) remove the usual ones. */
  logoutToken (claims: Record<string, unknown>, key?: SigningKey): Promise<string>
  close (): Promise<void>
}

/**
 * The sandbox's OpenID Connect provider (oidc-provider) on a loopback port, with the service
 * registered as a confidential client. `publishesOtherKeys`: its key set names a key it does not
 * sign with, as an impostor's tokens would look.
 */
export async function startTestProvider ({ publishesOtherKeys = false } = {}): Promise<TestProvider> {
  const port = await freePort()
  const issuer = `http://127.0.0.1:${port}`
  const { privateKey } = await generateKeyPair('RS256', { extractable: true })
  const jwk: JWK = { ...await exportJWK(privateKey), kid: 'test-key', alg: 'RS256', use: 'sig' }
  const accounts = Object.entries(PEOPLE).map(([sub, person]) => ({ login: sub, password: PASSWORD, sub, ...person }))
  const { provider, handle } = await createIdentityProvider({ issuer, accounts, clients: [portalClient(OIDC_CLIENT.id, OIDC_CLIENT.secret, [PORTAL_ORIGIN])], jwks: { keys: [jwk] } })
  if (publishesOtherKeys) {
    const { publicKey } = await generateKeyPair('RS256', { extractable: true })
    const other = { ...await exportJWK(publicKey), kid: 'test-key', alg: 'RS256', use: 'sig' }
    provider.use(async (ctx, next) => {
      if (ctx.path !== '/jwks') return next()
      ctx.type = 'application/jwk-set+json'
      ctx.body = { keys: [other] }
    })
  }
  const server: Server = createServer(handle)
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  return {
    issuer,
    settings: { OIDC_ISSUER: issuer, OIDC_CLIENT_ID: OIDC_CLIENT.id, OIDC_CLIENT_SECRET: OIDC_CLIENT.secret, PUBLIC_ORIGIN: PORTAL_ORIGIN },
    async logoutToken (claims, key) {
      const payload = Object.fromEntries(Object.entries({ iss: issuer, aud: OIDC_CLIENT.id, iat: Math.floor(Date.now() / 1000), jti: randomUUID(), events: { [BACKCHANNEL_LOGOUT_EVENT]: {} }, ...claims })
        .filter(([, value]) => value !== undefined))
      return new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid: 'test-key', typ: 'logout+jwt' }).sign(key ?? privateKey)
    },
    close: () => new Promise((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  }
}

/** Cookies as a browser keeps them for one host, paths and expiry aside: enough for the provider's interaction. */
export class CookieJar {
  readonly #cookies = new Map<string, string>()

  take (setCookie: string[]): void {
    for (const line of setCookie) {
      const [pair] = line.split(';')
      const [name, ...value] = pair!.split('=')
      this.#cookies.set(name!.trim(), value.join('='))
    }
  }

  get header (): string {
    return [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ')
  }
}

/**
 * Signs `account` in at the provider as a browser would: follows its redirects, posts its
 * sign-in and consent forms. Answers the URL the provider sends the browser back to.
 */
export async function signInAtProvider (authorizationUrl: string, account: string): Promise<URL> {
  const jar = new CookieJar()
  let url = authorizationUrl
  let form: Record<string, string> | undefined
  for (let hop = 0; hop < 20; hop++) {
    const response = await fetch(url, {
      method: form === undefined ? 'GET' : 'POST',
      redirect: 'manual',
      headers: { cookie: jar.header, ...(form === undefined ? {} : { 'content-type': 'application/x-www-form-urlencoded' }) },
      body: form === undefined ? undefined : new URLSearchParams(form)
    })
    jar.take(response.headers.getSetCookie())
    form = undefined
    const location = response.headers.get('location')
    if (location !== null) {
      const next = new URL(location, url)
      if (next.origin === PORTAL_ORIGIN) return next
      url = next.href
      continue
    }
    const page = await response.text()
    const action = /action="([^"]+)"/.exec(page)?.[1]
    const prompt = /name="prompt" value="([a-z]+)"/.exec(page)?.[1]
    if (action === undefined || prompt === undefined) throw new Error(`the provider answered ${response.status} without a form: ${page.slice(0, 300)}`)
    url = new URL(action, url).href
    form = prompt === 'login' ? { prompt, login: account, password: PASSWORD } : { prompt }
  }
  throw new Error('the provider never sent the browser back')
}

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { randomBytes } from 'node:crypto'
import { exportJWK, generateKeyPair, type JWK } from 'jose'
import Provider, { type Adapter, type AdapterPayload, type ClientMetadata, type Configuration, type KoaContextWithOIDC } from 'oidc-provider'
import { Secret, TOTP } from 'otpauth'
import type { BillingClient } from './billing.js'
import { defaultBillingClients } from './billing.js'

/** A person the provider signs in, as a WHMCS user: what the sign-in form takes, and the claims it answers. */
export interface IdentityAccount {
  /** What the sign-in form's first field takes: the email at WHMCS. */
  login: string
  password: string
  /** The provider's identifier of the person: WHMCS's user id. */
  sub: string
  email: string
  name: string
  /** false: the provider says the email is unverified. */
  emailVerified?: boolean
  /** The person's TOTP secret (base32) when two-factor authentication is on: the sign-in then asks for a code. */
  totpSecret?: string
}

/**
 * The TOTP secret of the sandbox's two-factor users (base32, as an authenticator app takes it):
 * six digits every 30 s, SHA-1, as WHMCS's Time Based Tokens module gives them.
 */
export const SANDBOX_TOTP_SECRET = 'JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP'

/** The current TOTP code of a secret, as the person's authenticator shows it. */
export function totpCode (secret: string, timestamp = Date.now()): string {
  return TOTP.generate({ secret: Secret.fromBase32(secret), timestamp })
}

/** The sandbox's people: one a billing client's owner, who signs in with the client's sign-in email and password. */
export function accountsOfBillingClients (clients: readonly BillingClient[] = defaultBillingClients): IdentityAccount[] {
  return clients.filter((client) => client.status !== 'Closed').map((client) => ({
    login: client.userEmail ?? client.email,
    password: client.password,
    sub: String(client.userid ?? client.id),
    email: client.userEmail ?? client.email,
    name: `${client.firstname} ${client.lastname}`,
    ...(client.twoFactor === true ? { totpSecret: SANDBOX_TOTP_SECRET } : {})
  }))
}

/** The service as a confidential client of the provider, with the URIs its public origins give. */
export function portalClient (clientId: string, clientSecret: string, portalOrigins: readonly string[]): ClientMetadata {
  return {
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: portalOrigins.map((origin) => `${origin}/auth/oidc/callback`),
    post_logout_redirect_uris: portalOrigins.map((origin) => `${origin}/`),
    backchannel_logout_uri: `${portalOrigins[0]}/auth/oidc/backchannel-logout`,
    backchannel_logout_session_required: true
  }
}

export interface IdentityProviderOptions {
  issuer: string
  accounts: readonly IdentityAccount[]
  clients: readonly ClientMetadata[]
  /** The signing key set; one RS256 key made for this run when not given. */
  jwks?: { keys: JWK[] }
}

/** What the provider answers with: its handler for a Node.js HTTP server, and the oidc-provider instance. */
export interface IdentityProvider {
  provider: Provider
  handle (request: IncomingMessage, response: ServerResponse): void
}

/**
 * The provider's state (sessions, grants, codes, tokens) in this process's memory, one store a
 * provider: the sandbox keeps nothing across a restart, as its in-memory default would, but chosen.
 */
function memoryStore (): (model: string) => Adapter {
  const entries = new Map<string, { payload: AdapterPayload, expiresAt: number }>()
  const live = (key: string) => {
    const entry = entries.get(key)
    if (entry !== undefined && entry.expiresAt <= Date.now()) entries.delete(key)
    return entries.get(key)?.payload
  }
  return (model) => {
    const key = (id: string) => `${model}:${id}`
    const findBy = (field: 'uid' | 'userCode', value: string) => [...entries.keys()].filter((stored) => stored.startsWith(`${model}:`)).map(live).find((payload) => payload?.[field] === value)
    return {
      async upsert (id, payload, expiresIn) { entries.set(key(id), { payload, expiresAt: expiresIn === undefined ? Infinity : Date.now() + expiresIn * 1000 }) },
      async find (id) { return live(key(id)) },
      async findByUid (uid) { return findBy('uid', uid) },
      async findByUserCode (userCode) { return findBy('userCode', userCode) },
      async consume (id) {
        const payload = live(key(id))
        if (payload !== undefined) payload.consumed = Math.floor(Date.now() / 1000)
      },
      async destroy (id) { entries.delete(key(id)) },
      async revokeByGrantId (grantId) {
        for (const [stored, { payload }] of entries) if (payload.grantId === grantId) entries.delete(stored)
      }
    }
  }
}

const LIFETIMES_S = { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 600, Session: 86_400, Grant: 86_400, RefreshToken: 86_400, ClientCredentials: 600 }

const escaped = (text: string) => text.replace(/[&<>"']/g, (character) => `&#${character.charCodeAt(0)};`)

function page (title: string, body: string): string {
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>${escaped(title)} · Billing (sandbox)</title>
<style>body{font-family:system-ui,sans-serif;max-width:24rem;margin:3rem auto}label,input,button{display:block;margin:.4rem 0}p.error{color:#b00}</style>
</head><body><h1>${escaped(title)}</h1>${body}</body></html>`
}

/** A form of the interaction: a hidden `prompt` names the step, as the provider's own pages do. */
function form (action: string, prompt: string, fields: string, submit: string): string {
  return `<form method="post" action="${escaped(action)}"><input type="hidden" name="prompt" value="${prompt}">${fields}<button type="submit">${escaped(submit)}</button></form>`
}

async function formBody (request: IncomingMessage): Promise<URLSearchParams> {
  const chunks: Buffer[] = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'))
}

function sendPage (response: ServerResponse, status: number, html: string): void {
  response.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' })
  response.end(html)
}

/**
 * An OpenID Connect provider that behaves as WHMCS's does, on the certified oidc-provider: the
 * code flow for a confidential client, discovery, its sign-in form (email and password), a TOTP
 * step for a person with two-factor authentication, a consent page the first time a client asks,
 * RP-initiated logout with its confirmation page, and back-channel logout to the clients that
 * register one. Its state is in memory: a restart signs everyone out.
 */
export async function createIdentityProvider (options: IdentityProviderOptions): Promise<IdentityProvider> {
  const { issuer, accounts, clients } = options
  const byLogin = new Map(accounts.map((account) => [account.login.toLowerCase(), account]))
  const bySub = new Map(accounts.map((account) => [account.sub, account]))
  let jwks = options.jwks
  if (jwks === undefined) {
    const { privateKey } = await generateKeyPair('RS256', { extractable: true })
    jwks = { keys: [{ ...await exportJWK(privateKey), kid: 'sandbox-key', alg: 'RS256', use: 'sig' }] }
  }
  // Who passed the password step and waits for their code, by interaction.
  const awaitingCode = new Map<string, IdentityAccount>()
  const configuration: Configuration = {
    clients: [...clients],
    jwks,
    adapter: memoryStore(),
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    ttl: LIFETIMES_S,
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    features: {
      devInteractions: { enabled: false },
      backchannelLogout: { enabled: true },
      rpInitiatedLogout: {
        enabled: true,
        logoutSource: (ctx: KoaContextWithOIDC, logoutForm: string) => {
          ctx.body = page('Sign out', `<p>Sign out of the billing system?</p>${logoutForm}<button type="submit" form="op.logoutForm" name="logout" value="yes" id="sign-out">Sign out</button><button type="submit" form="op.logoutForm">Stay signed in</button>`)
        },
        postLogoutSuccessSource: (ctx: KoaContextWithOIDC) => {
          ctx.body = page('Signed out', '<p>You are signed out of the billing system.</p>')
        }
      }
    },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    renderError: (ctx, out) => {
      ctx.type = 'html'
      ctx.body = page('Sign-in error', `<p class="error">${escaped(String(out.error))}: ${escaped(String(out.error_description ?? ''))}</p>`)
    },
    findAccount: (_ctx, sub) => {
      const account = bySub.get(sub)
      if (account === undefined) return undefined
      return { accountId: sub, claims: () => ({ sub, email: account.email, email_verified: account.emailVerified ?? true, name: account.name }) }
    },
    // The sandbox's clients are on this machine: the provider's calls to them (back-channel logout) go to loopback.
    fetch: (url, init) => fetch(url, { ...init, dispatcher: undefined } as RequestInit)
  }
  const provider = new Provider(issuer, configuration)

  const signInPage = (uid: string, error?: string) => page('Sign in', `${error === undefined ? '' : `<p class="error">${escaped(error)}</p>`}${form(`/interaction/${uid}/login`, 'login',
    '<label>Email <input name="login" type="email" autocomplete="username" required autofocus></label><label>Password <input name="password" type="password" autocomplete="current-password" required></label>', 'Sign in')}`)
  const codePage = (uid: string, error?: string) => page('Two-factor authentication', `${error === undefined ? '' : `<p class="error">${escaped(error)}</p>`}<p>Enter the code your authenticator app shows.</p>${form(`/interaction/${uid}/totp`, 'totp',
    '<label>Code <input name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" required autofocus></label>', 'Verify')}`)

  async function interaction (request: IncomingMessage, response: ServerResponse, uid: string, step: string | undefined): Promise<void> {
    const details = await provider.interactionDetails(request, response)
    const finish = (accountId: string) => provider.interactionFinished(request, response, { login: { accountId, amr: awaitingCode.has(uid) ? ['pwd', 'otp'] : ['pwd'] } }, { mergeWithLastSubmission: false })
    if (request.method === 'GET') {
      if (details.prompt.name === 'consent') {
        const client = await provider.Client.find(String(details.params.client_id))
        return sendPage(response, 200, page('Authorize access', `<p>${escaped(client?.clientName ?? String(details.params.client_id))} asks to see your name and email.</p>${form(`/interaction/${uid}/consent`, 'consent', '', 'Authorize')}`))
      }
      return sendPage(response, 200, awaitingCode.has(uid) ? codePage(uid) : signInPage(uid))
    }
    const body = await formBody(request)
    if (step === 'login') {
      const account = byLogin.get((body.get('login') ?? '').toLowerCase())
      if (account === undefined || account.password !== body.get('password')) return sendPage(response, 200, signInPage(uid, 'Invalid email or password'))
      if (account.totpSecret === undefined) return await finish(account.sub)
      awaitingCode.set(uid, account)
      // Forgotten with its interaction, whether or not a code came.
      setTimeout(() => awaitingCode.delete(uid), LIFETIMES_S.Interaction * 1000).unref()
      return sendPage(response, 200, codePage(uid))
    }
    if (step === 'totp') {
      const account = awaitingCode.get(uid)
      if (account === undefined) return sendPage(response, 200, signInPage(uid))
      // One period either side, as authenticator clocks drift.
      const valid = TOTP.validate({ token: body.get('code') ?? '', secret: Secret.fromBase32(account.totpSecret!), window: 1 }) !== null
      if (!valid) return sendPage(response, 200, codePage(uid, 'That code is not valid: try the current one'))
      await finish(account.sub)
      awaitingCode.delete(uid)
      return
    }
    if (step === 'consent') {
      const { prompt: { details: missing }, params, session, grantId } = details
      const grant = grantId === undefined ? new provider.Grant({ accountId: session!.accountId, clientId: String(params.client_id) }) : (await provider.Grant.find(grantId))!
      if (Array.isArray(missing.missingOIDCScope)) grant.addOIDCScope(missing.missingOIDCScope.join(' '))
      if (Array.isArray(missing.missingOIDCClaims)) grant.addOIDCClaims(missing.missingOIDCClaims as string[])
      return await provider.interactionFinished(request, response, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true })
    }
    sendPage(response, 404, page('Not found', ''))
  }

  // Composed at the first request, so that middleware added to the provider until then takes part.
  let providerHandler: ReturnType<Provider['callback']> | undefined
  return {
    provider,
    handle (request, response) {
      const match = /^\/interaction\/([\w-]+)(?:\/(login|totp|consent))?$/.exec(new URL(request.url ?? '/', 'http://provider.invalid').pathname)
      providerHandler ??= provider.callback()
      if (match === null) {
        providerHandler(request, response).catch(() => response.end())
        return
      }
      interaction(request, response, match[1]!, match[2]).catch((error: unknown) => {
        if (!response.headersSent) sendPage(response, 400, page('Sign-in error', `<p class="error">${escaped(error instanceof Error ? error.message : String(error))}</p>`))
        else response.end()
      })
    }
  }
}

export interface SandboxIdentityProvider {
  issuer: string
  /** The service's settings that point it at this provider. */
  settings: Record<'OIDC_ISSUER' | 'OIDC_CLIENT_ID' | 'OIDC_CLIENT_SECRET', string>
  accounts: readonly IdentityAccount[]
  /** The oidc-provider instance: its events tell what it issued. */
  provider: Provider
  close (): Promise<void>
}

export const SANDBOX_OIDC_CLIENT = { id: 'portal', secret: 'sandbox-client-secret-of-the-portal' }

/**
 * The sandbox's provider on 127.0.0.1 (`port` 0: any free one), its people the billing clients'
 * owners, the service registered as a client at each of `portalOrigins` (the first one receives
 * back-channel logouts).
 */
export async function startSandboxIdentityProvider ({ portalOrigins, port = 0, accounts = accountsOfBillingClients() }: { portalOrigins: readonly string[], port?: number, accounts?: readonly IdentityAccount[] }): Promise<SandboxIdentityProvider> {
  const server: Server = createServer()
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const { provider, handle } = await createIdentityProvider({ issuer, accounts, clients: [portalClient(SANDBOX_OIDC_CLIENT.id, SANDBOX_OIDC_CLIENT.secret, portalOrigins)] })
  server.on('request', handle)
  return {
    issuer,
    settings: { OIDC_ISSUER: issuer, OIDC_CLIENT_ID: SANDBOX_OIDC_CLIENT.id, OIDC_CLIENT_SECRET: SANDBOX_OIDC_CLIENT.secret },
    accounts,
    provider,
    close: () => new Promise((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  }
}

import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import * as openid from 'openid-client'
import { InvalidLogoutTokenError as InvalidToken } from '../integrations/oidc/provider.js'
import { InvalidLogoutTokenError, OidcUnavailableError } from '../lib/errors.js'
import { LOGIN_TTL_S, type OidcSignIn } from '../plugins/app/oidc/sign-in.js'
import { SESSION_COOKIE } from '../plugins/app/sessions.js'
import { BackchannelLogoutRequest, OidcCallbackQuery, OidcLoginQuery, SIGN_IN_ERRORS, type SignInError } from '../schemas/auth.js'
import { commonErrorResponses, errorResponse, invalidRequestResponse } from '../schemas/error.js'

/** The cookie that binds a sign-in under way to its browser. Lax: the provider's redirect back is a navigation from its site. */
export const LOGIN_COOKIE = '__Host-portal-oidc-login'
export const CALLBACK_PATH = '/auth/oidc/callback'

/** The origin the provider sends browsers back to: the first PUBLIC_ORIGIN, or the request's own. */
export function publicOriginOf (request: FastifyRequest, publicOrigins: readonly string[]): string {
  return publicOrigins[0] ?? `${request.protocol}://${request.host}`
}

/**
 * The sign-in limit per address, LOGIN_RATE_LIMIT_MAX a minute. Every way of signing in shares
 * one bucket: a second endpoint gives no second allowance.
 */
export function signInRateLimitOf (max: number) {
  return { rateLimit: { max, timeWindow: 60_000, groupId: 'sign-in', keyGenerator: (request: FastifyRequest) => `login:${request.ip}` } }
}

/** `returnTo` with the sign-in's failure, still on this site. */
function withError (returnTo: string, code: SignInError): string {
  const url = new URL(returnTo, 'https://service.invalid')
  url.searchParams.set('signInError', code)
  return `${url.pathname}${url.search}${url.hash}`
}

/** What a failed exchange says to the page: the provider refused, could not be reached, or its answer did not validate. */
function failureOf (error: unknown): SignInError {
  if (error instanceof openid.AuthorizationResponseError) return 'provider_refused'
  if (error instanceof openid.ResponseBodyError || error instanceof openid.ClientError) return 'token_refused'
  return 'unavailable'
}

const oidcRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  const signIn = fastify.oidcSignIn
  if (signIn === undefined) return
  const { publicOrigins } = fastify.config
  const loginCookie = (value?: string) => fastify.serializeCookie(LOGIN_COOKIE, value ?? '', { path: '/', httpOnly: true, secure: true, sameSite: 'lax', maxAge: value === undefined ? 0 : LOGIN_TTL_S })
  // Back-channel logout tokens come as a form (Back-Channel Logout 1.0, 2.5).
  fastify.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)))
  })

  fastify.get('/auth/oidc/login', {
    // Each sign-in begun is kept in Redis for 10 minutes: as many as password sign-ins an address may try.
    config: signInRateLimitOf(fastify.config.LOGIN_RATE_LIMIT_MAX),
    schema: {
      operationId: 'startOidcSignIn',
      tags: ['auth'],
      summary: 'Sign the browser in at the OpenID Connect provider: 302 to its sign-in page',
      description: `Navigate the page here (not fetch). The code flow with PKCE (S256); its state and nonce are bound to this browser by the cookie \`${LOGIN_COOKIE}\` (HttpOnly, Secure, SameSite=Lax, ${LOGIN_TTL_S} s). The provider sends the browser back to ${CALLBACK_PATH}, which sets the session cookie and sends it on to \`returnTo\`.`,
      security: [],
      querystring: OidcLoginQuery,
      response: {
        302: Type.Null({ description: 'to the provider' }),
        ...invalidRequestResponse,
        ...commonErrorResponses,
        503: errorResponse('The provider\'s discovery document could not be read yet, or Redis is unavailable (`OIDC_UNAVAILABLE`)')
      }
    }
  }, async (request, reply) => {
    if (!signIn.provider.discovered) throw new OidcUnavailableError()
    const redirectUri = `${publicOriginOf(request, publicOrigins)}${CALLBACK_PATH}`
    const { url, reference } = await signIn.begin(redirectUri, request.query.returnTo).catch((error: unknown) => {
      throw new OidcUnavailableError({ cause: error })
    })
    return reply.header('set-cookie', loginCookie(reference)).header('cache-control', 'no-store').redirect(url.href, 302)
  })

  fastify.get(CALLBACK_PATH, {
    schema: {
      operationId: 'finishOidcSignIn',
      tags: ['auth'],
      summary: 'Where the provider sends the browser back: starts the session, then 302 to returnTo',
      description: `Exchanges the code, validates the ID token (the provider's signature, iss, aud, exp, nonce) and finds the billing client acting for its verified email. A failure sends the browser to \`returnTo?signInError=<code>\`, one of ${SIGN_IN_ERRORS.map((code) => `\`${code}\``).join(', ')}, and starts no session.`,
      security: [],
      querystring: OidcCallbackQuery,
      response: { 302: Type.Null({ description: 'to `returnTo`, signed in or with `signInError`' }), ...invalidRequestResponse, ...commonErrorResponses }
    }
  }, async (request, reply) => {
    const cookies = fastify.parseCookie(request.headers.cookie ?? '')
    reply.header('cache-control', 'no-store')
    const pending = await signIn.take(cookies[LOGIN_COOKIE]).catch(() => undefined)
    const failed = (code: SignInError, returnTo = pending?.returnTo ?? '/') => reply.header('set-cookie', loginCookie()).redirect(withError(returnTo, code), 302)
    if (pending === undefined) return failed('login_expired')
    if (request.query.state !== pending.state) return failed('state_mismatch')
    const callbackUrl = new URL(request.url, publicOriginOf(request, publicOrigins))
    const person = await signIn.provider.signIn(callbackUrl, pending).catch((error: unknown) => {
      request.log.warn({ err: error }, 'OpenID Connect sign-in refused')
      return failureOf(error)
    })
    if (typeof person === 'string') return failed(person)
    const started = await startSession(signIn, request, reply, person, cookies[SESSION_COOKIE])
    if (started !== undefined) return failed(started)
    // Fastify adds each Set-Cookie to the session's.
    return reply.header('set-cookie', loginCookie()).redirect(pending.returnTo, 302)
  })

  fastify.post('/auth/oidc/backchannel-logout', {
    schema: {
      operationId: 'oidcBackchannelLogout',
      tags: ['auth'],
      summary: 'OpenID Connect Back-Channel Logout: the provider ends the sessions of its session (sid) or person (sub)',
      description: 'For the provider only. On every instance, with their SSE streams.',
      security: [],
      consumes: ['application/x-www-form-urlencoded'],
      body: BackchannelLogoutRequest,
      response: {
        200: Type.Null({ description: 'the sessions the token names have ended' }),
        400: errorResponse('The logout token is not one the provider signed for this service: a wrong signature, issuer or audience, too old, a nonce, no back-channel logout event, neither sid nor sub (`INVALID_LOGOUT_TOKEN`), or the form is malformed'),
        ...commonErrorResponses,
        503: errorResponse('The provider\'s keys or Redis could not be reached (`OIDC_UNAVAILABLE`); the provider may retry')
      }
    }
  }, async (request, reply) => {
    if (!signIn.provider.discovered) throw new OidcUnavailableError()
    const target = await signIn.provider.verifyLogoutToken(request.body.logout_token).catch((error: unknown) => {
      throw error instanceof InvalidToken ? new InvalidLogoutTokenError(error.message) : new OidcUnavailableError({ cause: error })
    })
    const ended = await signIn.end(target).catch((error: unknown) => { throw new OidcUnavailableError({ cause: error }) })
    request.log.info({ ended }, 'back-channel logout')
    return reply.header('cache-control', 'no-store').code(200).send(null)
  })
}

/** Starts the cookie session of a person the provider signed in; answers the failure, if any. */
async function startSession (signIn: OidcSignIn, request: FastifyRequest, reply: FastifyReply, person: Awaited<ReturnType<OidcSignIn['provider']['signIn']>>, heldCookie: string | undefined): Promise<SignInError | undefined> {
  const fastify = request.server
  if (person.email === undefined || person.emailVerified === false) return 'email_unverified'
  const email = person.email
  try {
    const client = await fastify.billingQueue.run((deadline) => fastify.billing.clientActingFor(email, deadline))
    if (client === null) return 'no_client_account'
    await fastify.sessions.endHeldBy(heldCookie)
    const sealedIdToken = signIn.options.sealer.seal(person.idToken)
    const { cookie, session } = await fastify.sessions.start(client.clientId, { signIn: 'oidc', name: person.name ?? client.name, email, sealedIdToken })
    await signIn.record(session, person)
    reply.header('set-cookie', fastify.sessionCookieHeader(cookie))
    return undefined
  } catch (error) {
    request.log.warn({ err: error }, 'OpenID Connect sign-in: no session could be started')
    return 'unavailable'
  }
}

export default oidcRoutes

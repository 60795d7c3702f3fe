import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import * as openid from 'openid-client'
import { InvalidLogoutTokenError as InvalidToken } from '../../../../integrations/oidc/provider.js'
import {
  InvalidLogoutTokenError, NoClientAccountError, NoClientChoiceError, OidcUnavailableError
} from '../../../../lib/errors.js'
import { LOGIN_TTL_S } from './sign-in.js'
import { SESSION_COOKIE } from '../sessions.js'
import {
  BackchannelLogoutRequest, ChooseClientRequest, ClientChoice, OidcCallbackQuery, OidcLoginQuery, SessionInfo,
  SIGN_IN_ERRORS, type SignInError
} from '../../../../schemas/auth.js'
import {
  bodyErrorResponses, commonErrorResponses, errorResponse, invalidRequestResponse
} from '../../../../schemas/error.js'
import { publicOriginOf, sessionInfo, signInRateLimitOf } from '../sign-in-answers.js'
import { CHOICE_COOKIE, choiceCookie, signInPerson, startSession } from './person-sessions.js'

export { CHOICE_COOKIE }

/**
 * The cookie that binds a sign-in under way to its browser. Lax: the provider's redirect back is a navigation
 * from its site.
 */
export const LOGIN_COOKIE = '__Host-portal-oidc-login'
export const CALLBACK_PATH = '/auth/oidc/callback'
/** The query parameter the callback adds to `returnTo` when the person acts for several clients and must pick one. */
export const CHOOSE_CLIENT_PARAMETER = 'chooseClient'

/** `returnTo` with a parameter added (the sign-in's failure, or that a client is to be chosen), still on this site. */
function withParameter (returnTo: string, name: string, value: string): string {
  const url = new URL(returnTo, 'https://service.invalid')
  url.searchParams.set(name, value)
  return `${url.pathname}${url.search}${url.hash}`
}

/**
 * What a failed exchange says to the page: the provider refused, could not be reached, or its answer did not validate.
 */
function failureOf (error: unknown): SignInError {
  if (error instanceof openid.AuthorizationResponseError) return 'provider_refused'
  if (error instanceof openid.ResponseBodyError || error instanceof openid.ClientError) return 'token_refused'
  return 'unavailable'
}

/** Why a choice of client, which Redis keeps as it keeps sessions, may answer 503. */
const CHOICE_UNAVAILABLE =
  'Redis, which keeps the choice and the sessions, is unavailable (`AUTH_UNAVAILABLE`): retry shortly'

const oidcRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  const signIn = fastify.oidcSignIn
  if (signIn === undefined) return
  const { publicOrigins } = fastify.config
  const loginCookie = (value?: string) =>
    fastify.serializeCookie(LOGIN_COOKIE, value ?? '', {
      path: '/',
      httpOnly: true,
      secure: true,
      sameSite: 'lax',
      maxAge: value === undefined ? 0 : LOGIN_TTL_S
    })
  if (fastify.getSchema('SessionInfo') === undefined) fastify.addSchema(SessionInfo)
  for (const schema of [ClientChoice, ChooseClientRequest]) fastify.addSchema(schema)
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
        503: errorResponse(
          'The provider\'s discovery document could not be read yet, or Redis is unavailable (`OIDC_UNAVAILABLE`)'
        )
      }
    }
  }, async (request, reply) => {
    if (!signIn.provider.discovered) throw new OidcUnavailableError()
    const redirectUri = `${publicOriginOf(request, publicOrigins)}${CALLBACK_PATH}`
    const { url, reference } = await signIn.begin(redirectUri, request.query.returnTo).catch((error: unknown) => {
      throw new OidcUnavailableError({ cause: error })
    })
    return reply
      .header('set-cookie', loginCookie(reference))
      .header('cache-control', 'no-store')
      .redirect(url.href, 302)
  })

  fastify.get(CALLBACK_PATH, {
    schema: {
      operationId: 'finishOidcSignIn',
      tags: ['auth'],
      summary: 'Where the provider sends the browser back: starts the session, then 302 to returnTo',
      description: `Exchanges the code, validates the ID token (the provider's signature, iss, aud, exp, nonce) and finds the billing client acting for its verified email. A failure sends the browser to \`returnTo?signInError=<code>\`, one of ${SIGN_IN_ERRORS.map((code) => `\`${code}\``).join(', ')}, and starts no session.`,
      security: [],
      querystring: OidcCallbackQuery,
      response: {
        302: Type.Null({ description: 'to `returnTo`, signed in or with `signInError`' }),
        ...invalidRequestResponse,
        ...commonErrorResponses
      }
    }
  }, async (request, reply) => {
    const cookies = fastify.parseCookie(request.headers.cookie ?? '')
    reply.header('cache-control', 'no-store')
    const pending = await signIn.take(cookies[LOGIN_COOKIE]).catch(() => undefined)
    const failed = (code: SignInError, returnTo = pending?.returnTo ?? '/') =>
      reply.header('set-cookie', loginCookie()).redirect(withParameter(returnTo, 'signInError', code), 302)
    if (pending === undefined) return failed('login_expired')
    if (request.query.state !== pending.state) return failed('state_mismatch')
    const callbackUrl = new URL(request.url, publicOriginOf(request, publicOrigins))
    const person = await signIn.provider.signIn(callbackUrl, pending).catch((error: unknown) => {
      request.log.warn({ err: error }, 'OpenID Connect sign-in refused')
      return failureOf(error)
    })
    if (typeof person === 'string') return failed(person)
    const started = await signInPerson(signIn, request, reply, person, pending.returnTo, cookies[SESSION_COOKIE])
    if (started === 'choose') {
      return reply
        .header('set-cookie', loginCookie())
        .redirect(withParameter(pending.returnTo, CHOOSE_CLIENT_PARAMETER, '1'), 302)
    }
    if (started !== undefined) return failed(started)
    // Fastify adds each Set-Cookie to the session's.
    return reply.header('set-cookie', loginCookie()).redirect(pending.returnTo, 302)
  })

  fastify.get('/auth/oidc/choice', {
    schema: {
      operationId: 'getClientChoice',
      tags: ['auth'],
      summary: 'The billing clients a person who just signed in at the provider acts for, to pick one',
      description: `When the person acts for several billing clients, the callback starts no session yet: it sets the cookie \`${CHOICE_COOKIE}\` (HttpOnly, Secure, SameSite=Strict, ${LOGIN_TTL_S} s) and sends the browser to \`returnTo?${CHOOSE_CLIENT_PARAMETER}=1\`. The page lists these clients, and POST /auth/oidc/choice starts the session for the one picked.`,
      security: [],
      response: {
        200: Type.Ref(ClientChoice, { description: 'a choice under way: the clients to pick from' }),
        401: errorResponse(
          'No choice is under way for this browser: it was made, it expired, or the cookie is missing (`NO_CLIENT_CHOICE`)'
        ),
        ...commonErrorResponses,
        503: errorResponse(CHOICE_UNAVAILABLE)
      }
    }
  }, async (request, reply) => {
    reply.header('cache-control', 'no-store')
    const choice = await signIn.choice(fastify.parseCookie(request.headers.cookie ?? '')[CHOICE_COOKIE])
    if (choice === undefined) throw new NoClientChoiceError()
    return { name: choice.person.name ?? null, email: choice.person.email, clients: choice.clients }
  })

  fastify.post('/auth/oidc/choice', {
    onRequest: [fastify.requireSameSite, fastify.requireDatabase],
    config: signInRateLimitOf(fastify.config.LOGIN_RATE_LIMIT_MAX),
    schema: {
      operationId: 'chooseClient',
      tags: ['auth'],
      summary: 'Picks the billing client the session acts for, and starts it: sets the session cookie',
      description: 'For a person who acts for several billing clients, after the provider signed them in (GET /auth/oidc/choice lists them). The choice is used once, when the session for it is stored: a request that fails before that (503, 500) leaves the choice for a retry; a session the browser\'s cookie held ends, as at any sign-in.',
      security: [],
      body: Type.Ref(ChooseClientRequest),
      response: {
        200: Type.Ref(SessionInfo, { description: 'signed in: the `Set-Cookie` header carries the session' }),
        ...bodyErrorResponses,
        401: errorResponse(
          'No choice is under way for this browser: it was made, it expired, or the cookie is missing (`NO_CLIENT_CHOICE`)'
        ),
        403: errorResponse(
          'The person does not act for this client (`NO_CLIENT_ACCOUNT`), or the request comes from another site (`CSRF_REJECTED`)'
        ),
        ...commonErrorResponses,
        503: errorResponse(
          `${CHOICE_UNAVAILABLE}: no session has started, and the choice is kept for the retry until it expires. Only if Redis failed as the choice was being taken does the retry answer 401 \`NO_CLIENT_CHOICE\`: sign in again`
        )
      }
    }
  }, async (request, reply) => {
    reply.header('cache-control', 'no-store')
    const cookies = fastify.parseCookie(request.headers.cookie ?? '')
    const reference = cookies[CHOICE_COOKIE]
    const choice = await signIn.choice(reference)
    if (choice === undefined) throw new NoClientChoiceError()
    const client = choice.clients.find(({ clientId }) => clientId === request.body.clientId)
    if (client === undefined) throw new NoClientAccountError()
    // The choice is taken once its session is stored: a failure before that leaves it for the retry. Of two
    // requests choosing at once, the one that does not take it ends its session, whose cookie no browser got.
    const { cookie, session } = await startSession(signIn, fastify, choice.person, client, cookies[SESSION_COOKIE])
    const taken = await signIn.takeChoice(reference!).catch((error: unknown) => error as Error)
    if (taken !== true) {
      await fastify.sessions.end(session).catch((error: unknown) => {
        request.log.warn({ err: error }, 'a session no browser holds could not be ended: it idles out')
      })
      throw taken === false ? new NoClientChoiceError() : taken
    }
    reply.header('set-cookie', fastify.sessionCookieHeader(cookie)).header('set-cookie', choiceCookie(fastify))
    return sessionInfo(session)
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
        400: errorResponse(
          'The logout token is not one the provider signed for this service: a wrong signature, issuer or audience, too old, a nonce, no back-channel logout event, neither sid nor sub (`INVALID_LOGOUT_TOKEN`), or the form is malformed'
        ),
        ...commonErrorResponses,
        503: errorResponse(
          'The provider\'s keys or Redis could not be reached (`OIDC_UNAVAILABLE`); the provider may retry'
        )
      }
    }
  }, async (request, reply) => {
    if (!signIn.provider.discovered) throw new OidcUnavailableError()
    const target = await signIn.provider.verifyLogoutToken(request.body.logout_token).catch((error: unknown) => {
      throw error instanceof InvalidToken
        ? new InvalidLogoutTokenError(error.message)
        : new OidcUnavailableError({ cause: error })
    })
    const ended = await signIn.end(target).catch((error: unknown) => {
      throw new OidcUnavailableError({ cause: error })
    })
    request.log.info({ ended }, 'back-channel logout')
    return reply.header('cache-control', 'no-store').code(200).send(null)
  })
}

export default oidcRoutes

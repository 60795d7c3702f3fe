import { createHash, randomUUID } from 'node:crypto'
import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply } from 'fastify'
import {
  BillingUnavailableError, InvalidCredentialsError, PasswordSignInOffError, NoClientAccountError,
  TooManyFailedSignInsError, TwoFactorRequiredError, UpstreamFailure
} from '../../../lib/errors.js'
import { FailureLimiter, type Limit } from '../../../lib/failure-limiter.js'
import { SESSION_COOKIE } from './sessions.js'
import { AccessToken, LoginRequest, LogoutAnswer, SessionInfo, SignInMethods } from '../../../schemas/auth.js'
import { publicOriginOf, sessionInfo, signInRateLimitOf } from './sign-in-answers.js'
import {
  authenticatedErrorResponses, BILLING_UNAVAILABLE, bodyErrorResponses, commonErrorResponses, errorResponse,
  TOKEN_CHECK_UNAVAILABLE, unsafeAuthenticatedErrorResponses
} from '../../../schemas/error.js'
import { signInFailuresPrefix } from '../redis-keys.js'

const signInErrorResponses = {
  ...commonErrorResponses,
  ...bodyErrorResponses,
  401: errorResponse('The email and password do not match a billing account (`INVALID_CREDENTIALS`)'),
  403: errorResponse(
    'The account has two-factor authentication on, which sign-in through the billing API cannot complete (`TWO_FACTOR_REQUIRED`), or no billing client account found acts for the user (`NO_CLIENT_ACCOUNT`)'
  ),
  429: errorResponse(
    'More than `LOGIN_RATE_LIMIT_MAX` sign-ins (by token or session) from this address in a minute (`RATE_LIMITED`), or `LOGIN_ACCOUNT_FAILURES_MAX` failed sign-ins of this email from any address within `LOGIN_ACCOUNT_WINDOW_MS` (`TOO_MANY_FAILED_SIGN_INS`, whether or not the account exists); `retry-after` says when to try again'
  ),
  503: errorResponse(`${BILLING_UNAVAILABLE}; or Redis is unavailable and \`AUTH_BLACKLIST_FAIL_CLOSED\` is on, so no token or session could be checked (\`AUTH_UNAVAILABLE\`)`)
}

const signOutErrorResponses = {
  ...unsafeAuthenticatedErrorResponses,
  503: errorResponse(`Redis is unavailable: the sign-out cannot be stored, nor the credential checked (\`AUTH_UNAVAILABLE\`); ${TOKEN_CHECK_UNAVAILABLE}`)
}

const authRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [LoginRequest, AccessToken, SessionInfo, LogoutAnswer, SignInMethods]) fastify.addSchema(schema)
  const {
    ACCESS_TOKEN_TTL_SECONDS,
    PASSWORD_SIGN_IN,
    LOGIN_RATE_LIMIT_MAX,
    LOGIN_ACCOUNT_FAILURES_MAX,
    LOGIN_ACCOUNT_WINDOW_MS,
    REDIS_KEY_PREFIX
  } = fastify.config
  const accountFailures = new FailureLimiter(fastify.redis, {
    keyPrefix: signInFailuresPrefix(REDIS_KEY_PREFIX),
    max: LOGIN_ACCOUNT_FAILURES_MAX,
    windowMs: LOGIN_ACCOUNT_WINDOW_MS
  })
  // The account's key: its email as billing compares it, hashed so that Redis holds no address.
  const accountOf = (email: string) => createHash('sha256').update(email.trim().toLowerCase()).digest('hex')
  // Redis away: sign-in goes on unlimited, as rate limiting does (the specification), and says so.
  const unlimited = (error: unknown): Limit => {
    fastify.log.warn({ err: error }, 'sign-in failures cannot be counted: Redis is unavailable')
    return { limited: false, retryAfterSeconds: 0 }
  }
  const signInRateLimit = signInRateLimitOf(LOGIN_RATE_LIMIT_MAX)

  /** Checks the email and password with billing, within the sign-in limits; answers the billing client id. */
  async function signIn (
    email: string,
    password: string,
    reply: FastifyReply
  ): Promise<{ clientId: number, name: string | null }> {
    await fastify.tokenBlacklist.ensureCheckable()
    const account = accountOf(email)
    const limit = await accountFailures.check(account).catch(unlimited)
    if (limit.limited) {
      reply.header('retry-after', limit.retryAfterSeconds)
      throw new TooManyFailedSignInsError(`${limit.retryAfterSeconds} seconds`)
    }
    const outcome = await fastify.upstreams.billing.queue
      .run((deadline) => fastify.upstreams.billing.client.signIn(email, password, deadline))
      .catch((error: unknown) => {
        throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
      })
    // One answer whatever was wrong: an unknown email and a wrong password look alike, and count alike.
    if (outcome.outcome === 'invalid_credentials') {
      await accountFailures.fail(account).catch(unlimited)
      throw new InvalidCredentialsError()
    }
    // The billing API checks the password only: a token now would skip the account's second factor.
    if (outcome.outcome === 'two_factor_required') throw new TwoFactorRequiredError()
    if (outcome.outcome === 'no_client_account') throw new NoClientAccountError()
    await accountFailures.reset(account).catch(unlimited)
    return outcome
  }

  fastify.post('/auth/login', {
    onRequest: fastify.requireDatabase,
    config: signInRateLimit,
    schema: {
      operationId: 'signIn',
      tags: ['auth'],
      summary: 'Sign in with the billing account; returns a Bearer access token',
      description: 'For clients other than the portal\'s browser app, which signs in with POST /auth/session and keeps no token.',
      security: [],
      body: Type.Ref(LoginRequest),
      response: { 200: Type.Ref(AccessToken, { description: 'signed in' }), ...signInErrorResponses }
    }
  }, async (request, reply) => {
    const { clientId } = await signIn(request.body.email, request.body.password, reply)
    const jti = randomUUID()
    // Recorded before it is handed out: signing out everywhere revokes every token it can find.
    await fastify.sessions.recordToken(jti, clientId, Math.ceil(Date.now() / 1000) + ACCESS_TOKEN_TTL_SECONDS)
    const accessToken = await fastify.jwt.sign({ sub: String(clientId), jti })
    return { accessToken, expiresIn: ACCESS_TOKEN_TTL_SECONDS, tokenType: 'Bearer' as const }
  })

  fastify.post('/auth/session', {
    onRequest: [fastify.requireSameSite, fastify.requireDatabase],
    config: signInRateLimit,
    schema: {
      operationId: 'startSession',
      tags: ['auth'],
      summary: 'Sign the portal\'s browser app in: sets the session cookie',
      description: `Checks the email and password as POST /auth/login does, with the same limits and errors, and sets the cookie \`${SESSION_COOKIE}\` (HttpOnly, Secure, SameSite=Strict, Path=/). The body holds no token: the page never sees one. Send the cookie with every portal request (\`credentials: 'include'\` from another origin) and \`x-csrf: 1\` with every POST. The session ends after \`SESSION_IDLE_TIMEOUT_S\` without use, \`SESSION_MAX_AGE_S\` after sign-in, at sign-out, or at the next sign-in from the same browser: a sign-in that carries a live session's cookie ends that session, and its streams.`,
      security: [],
      body: Type.Ref(LoginRequest),
      response: {
        200: Type.Ref(SessionInfo, { description: 'signed in: the `Set-Cookie` header carries the session' }),
        ...signInErrorResponses,
        403: errorResponse(`${signInErrorResponses[403].description}; or \`PASSWORD_SIGN_IN\` is off, as it is by default with \`OIDC_ISSUER\`, and browsers sign in through the provider (\`PASSWORD_SIGN_IN_OFF\`); or the request comes from another site (\`Sec-Fetch-Site: cross-site\`, or an \`Origin\` that is none of this service's own, \`PUBLIC_ORIGIN\` and \`CORS_ORIGIN\`): \`CSRF_REJECTED\``)
      }
    }
  }, async (request, reply) => {
    if (!PASSWORD_SIGN_IN) throw new PasswordSignInOffError()
    const { clientId, name } = await signIn(request.body.email, request.body.password, reply)
    // The new cookie replaces the old one in the browser: the session it held ends, with its
    // streams, rather than live on unseen (decision 0090).
    const { cookie: header } = request.headers
    await fastify.sessions.endHeldBy(header === undefined ? undefined : fastify.parseCookie(header)[SESSION_COOKIE])
    const { cookie, session } = await fastify.sessions.start(clientId, {
      signIn: 'password',
      name,
      email: request.body.email
    })
    reply.header('set-cookie', fastify.sessionCookieHeader(cookie))
    return sessionInfo(session)
  })

  fastify.get('/auth/sign-in-methods', {
    schema: {
      operationId: 'getSignInMethods',
      tags: ['auth'],
      summary: 'How a browser may sign in here: with a password, at the OpenID Connect provider, or both',
      description: 'For the page to show its sign-in form, its button to the provider, or both. It says what is configured: while the provider cannot be reached, GET /auth/oidc/login answers 503.',
      security: [],
      response: { 200: Type.Ref(SignInMethods, { description: 'the ways offered here' }), ...commonErrorResponses }
    }
  }, async () => ({ password: PASSWORD_SIGN_IN, oidc: fastify.oidcSignIn !== undefined }))

  fastify.get('/auth/session', {
    onRequest: fastify.authenticateSession,
    schema: {
      operationId: 'getSession',
      tags: ['auth'],
      summary: 'The signed-in session: who it acts for and when it ends',
      description: 'Asking does not extend the session: a page may poll it to show when the session ends.',
      security: [{ sessionCookie: [] }],
      response: {
        200: Type.Ref(SessionInfo, { description: 'a live session' }),
        ...authenticatedErrorResponses,
        503: errorResponse(TOKEN_CHECK_UNAVAILABLE)
      }
    }
  }, async (request) => sessionInfo(request.session!))

  fastify.post('/auth/logout', {
    onRequest: [fastify.requireDatabase, fastify.authenticate],
    schema: {
      operationId: 'signOut',
      tags: ['auth'],
      summary: 'Sign out: ends the cookie session, or revokes the access token until it expires',
      description: 'Every instance ends the SSE streams opened with the session or token. With the cookie, the answer clears it.',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      response: {
        200: Type.Ref(LogoutAnswer, {
          description: 'signed out of a session begun at the OpenID Connect provider: the page navigates to `logoutUrl` to sign out there too'
        }),
        204: Type.Null({ description: 'signed out' }),
        ...signOutErrorResponses
      }
    }
  }, async (request, reply) => {
    const { session } = request
    if (session === undefined) {
      await fastify.tokenBlacklist.revoke(request.user.jti, request.user.exp)
      return reply.code(204).send(null)
    }
    await fastify.sessions.end(session)
    reply.header('set-cookie', fastify.sessionCookieHeader())
    const { oidcSignIn } = fastify
    const logoutUrl = session.identity.signIn === 'oidc' && oidcSignIn?.provider.discovered === true
      ? oidcSignIn.logoutUrl(`${publicOriginOf(request, fastify.config.publicOrigins)}/`)
      : undefined
    return logoutUrl === undefined ? reply.code(204).send(null) : reply.code(200).send({ logoutUrl })
  })

  fastify.post('/auth/logout-all', {
    onRequest: [fastify.requireDatabase, fastify.authenticate],
    schema: {
      operationId: 'signOutEverywhere',
      tags: ['auth'],
      summary: 'Sign out everywhere: ends every session and revokes every access token of the signed-in client',
      description: 'On every instance, with their SSE streams; the caller\'s own session or token too.',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      response: { 204: Type.Null({ description: 'signed out everywhere' }), ...signOutErrorResponses }
    }
  }, async (request, reply) => {
    const ended = await fastify.sessions.endEverywhere(request.user.clientId)
    // A token issued before it was recorded (by an older release) is revoked all the same.
    if (request.session === undefined) await fastify.tokenBlacklist.revoke(request.user.jti, request.user.exp)
    else reply.header('set-cookie', fastify.sessionCookieHeader())
    request.log.info({ clientId: request.user.clientId, ended }, 'signed out everywhere')
    return reply.code(204).send(null)
  })
}

export default authRoutes

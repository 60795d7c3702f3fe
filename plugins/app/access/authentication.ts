import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { CsrfRejectedError, RateLimitedError, UnauthorizedError } from '../../../lib/errors.js'
import { FailureLimiter } from '../../../lib/failure-limiter.js'
import { SESSION_COOKIE, type Session } from './sessions.js'
import { tokenFailuresPrefix } from '../redis-keys.js'
import { bearerToken } from '../../../lib/bearer-token.js'
import type { AccessTokenClaims } from '../../external/jwt.js'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * onRequest hook of the portal routes: a valid, unrevoked Bearer access token, or else a live
     * cookie session, renewed once the request has succeeded (unless its route's config says
     * `renewsSession: false`); an unsafe request made with the cookie must pass the CSRF checks.
     */
    authenticate (request: FastifyRequest, reply: FastifyReply): Promise<void>
    /** A live cookie session only, left as it is: asking about a session does not extend it. */
    authenticateSession (request: FastifyRequest, reply: FastifyReply): Promise<void>
    /**
     * onRequest hook of the cookie sign-in: refused from another site, so no page elsewhere can sign a
     * browser in to an account of its choosing.
     */
    requireSameSite (request: FastifyRequest, reply: FastifyReply): Promise<void>
  }
  interface FastifyRequest {
    /** The cookie session the request was authenticated by; undefined with a bearer token. */
    session: Session | undefined
  }
  interface FastifyContextConfig {
    /** false: a request of this route never renews its session (an event stream, decision 0089). */
    renewsSession?: boolean
  }
}

/** Requests whose session is renewed if they succeed: a refused or failed request never renews one (decision 0089). */
const renewIfSucceeded = new WeakSet<FastifyRequest>()

/** Failed token checks are counted per client address over a minute. */
const TOKEN_FAILURE_WINDOW_MS = 60_000
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/**
 * The header a page must add to an unsafe request made with the cookie: a form cannot, and a cross-origin
 * script must pass a CORS preflight to.
 */
export const CSRF_HEADER = 'x-csrf'

/**
 * Why an unsafe request made with the session cookie is refused, if it is: the custom header is
 * missing or wrong, the browser says it comes from another site, or it names an origin that is
 * none of the allowed ones (PUBLIC_ORIGIN, CORS_ORIGIN) and not the request's own. Each reason is
 * the rule, as the page's developer reads it in CSRF_REJECTED's message.
 */
export const CSRF_REFUSALS = {
  noHeader: 'a request made with the session cookie needs the header x-csrf: 1, and it was not sent',
  wrongHeader: 'a request made with the session cookie needs the header x-csrf: 1, and it was sent with another value',
  crossSite: 'the browser says the request comes from another site (Sec-Fetch-Site: cross-site)',
  foreignOrigin: 'the request\'s Origin is none of this service\'s own (its own origin, PUBLIC_ORIGIN, CORS_ORIGIN)'
} as const
export type CsrfRefusal = typeof CSRF_REFUSALS[keyof typeof CSRF_REFUSALS]

export function csrfRefusal (request: FastifyRequest, allowedOrigins: ReadonlySet<string>): CsrfRefusal | undefined {
  if (SAFE_METHODS.has(request.method)) return undefined
  const header = request.headers[CSRF_HEADER]
  if (header === undefined) return CSRF_REFUSALS.noHeader
  if (header !== '1') return CSRF_REFUSALS.wrongHeader
  return crossSiteRefusal(request, allowedOrigins)
}

/**
 * Why a request is taken to come from another site, if it is. Its own origin is the one Fastify
 * sees: behind a TLS-terminating proxy, that is the browser's only with TRUST_PROXY and a proxy that
 * forwards the scheme and host; PUBLIC_ORIGIN names it otherwise.
 */
function crossSiteRefusal (request: FastifyRequest, allowedOrigins: ReadonlySet<string>): CsrfRefusal | undefined {
  if (request.headers['sec-fetch-site'] === 'cross-site') return CSRF_REFUSALS.crossSite
  const origin = request.headers.origin
  if (origin !== undefined && !allowedOrigins.has(origin) && origin !== `${request.protocol}://${request.host}`) return CSRF_REFUSALS.foreignOrigin
  return undefined
}

/** What an authenticated answer depends on besides its URL, added to what `Vary` names already (CORS's `Origin`). */
const CREDENTIAL_HEADERS = ['Cookie', 'Authorization']

/**
 * `Vary` with the credential headers added, by the value it had: the service's own plugins set it
 * (CORS's `Origin`), so there are few, and each is worked out once rather than on every request.
 */
const varyWithCredentials = new Map<string, string>()
const VARY_VALUES_KEPT = 16

function varyOnCredentials (reply: FastifyReply): void {
  const vary = String(reply.getHeader('vary') ?? '')
  let withCredentials = varyWithCredentials.get(vary)
  if (withCredentials === undefined) {
    const named = vary.split(',').map((name) => name.trim()).filter((name) => name !== '')
    const added = CREDENTIAL_HEADERS.filter(
      (name) => !named.some((known) => known.toLowerCase() === name.toLowerCase())
    )
    withCredentials = [...named, ...added].join(', ')
    if (varyWithCredentials.size < VARY_VALUES_KEPT) varyWithCredentials.set(vary, withCredentials)
  }
  reply.header('vary', withCredentials)
}

/** Refuses a request with 403 CSRF_REJECTED when a refusal was found, logging why. */
function refuseIf (request: FastifyRequest, refusal: CsrfRefusal | undefined): void {
  if (refusal === undefined) return
  request.log.warn(
    { reason: refusal, origin: request.headers.origin, secFetchSite: request.headers['sec-fetch-site'] },
    'request with the session cookie refused as cross-site'
  )
  throw new CsrfRejectedError(refusal)
}

/** What the authentication hooks do; the plugin decorates the instance with them. */
class Authenticator {
  readonly #failures: FailureLimiter
  readonly #allowedOrigins: ReadonlySet<string>
  readonly #clientRequestLimit: FastifyInstance['clientRequestLimit']

  constructor (private readonly fastify: FastifyInstance) {
    const { REDIS_KEY_PREFIX, TOKEN_FAILURES_MAX, publicOrigins, corsOrigins } = fastify.config
    this.#clientRequestLimit = fastify.clientRequestLimit
    this.#failures = new FailureLimiter(fastify.redis, {
      keyPrefix: tokenFailuresPrefix(REDIS_KEY_PREFIX),
      max: TOKEN_FAILURES_MAX,
      windowMs: TOKEN_FAILURE_WINDOW_MS
    })
    this.#allowedOrigins = new Set([...publicOrigins, ...corsOrigins])
  }

  /** A Bearer access token if the request carries one, else the cookie session. */
  async authenticate (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (request.headers.authorization === undefined) return await this.bySession(request, reply, true)
    varyOnCredentials(reply)
    // fastify.jwt.verify rather than request.jwtVerify: the same verifier, without decoding the
    // token a second time and merging the options on every request (BENCHMARKS.md, the cached read).
    const token = bearerToken(request.headers.authorization)
    if (token === undefined) return await this.#refuse(request, reply)
    try {
      const claims: AccessTokenClaims & { exp: number, iat: number } = this.fastify.jwt.verify(token)
      // Verified: `sub` is a client id, `exp` is there, `iat` is signed in.
      request.user = { ...claims, clientId: Number(claims.sub) }
    } catch {
      return await this.#refuse(request, reply)
    }
    const { jti, clientId } = request.user
    const clientRequestLimit = this.#clientRequestLimit
    if (!clientRequestLimit.limits(request)) {
      if (await this.fastify.tokenBlacklist.isRevoked(jti)) await this.#refuse(request, reply)
      return
    }
    // The request is counted against its client's limit in the same command (decision 0108).
    const { revoked, count } = await this.fastify.tokenBlacklist.lookupAndCount(jti, {
      key: clientRequestLimit.key(clientId),
      windowMs: clientRequestLimit.windowMs
    })
    if (revoked) await this.#refuse(request, reply)
    if (count !== undefined) clientRequestLimit.apply(request, reply, count)
  }

  async bySession (request: FastifyRequest, reply: FastifyReply, renew: boolean): Promise<void> {
    varyOnCredentials(reply)
    const cookie = this.#sessionCookie(request)
    if (cookie === undefined) return await this.#refuse(request, reply)
    // Authentication first: a cookie naming no live session is a 401 whatever else is wrong.
    const refusal = csrfRefusal(request, this.#allowedOrigins)
    const session = await this.fastify.sessions.read(cookie)
    if (session === undefined) return await this.#refuse(request, reply, cookie)
    refuseIf(request, refusal)
    request.session = session
    if (renew && request.routeOptions.config.renewsSession !== false) renewIfSucceeded.add(request)
    request.user = {
      sub: String(session.clientId),
      clientId: session.clientId,
      jti: session.id,
      exp: Math.ceil(session.expiresAt / 1000),
      iat: 0
    }
  }

  requireSameSite (request: FastifyRequest): void {
    refuseIf(request, crossSiteRefusal(request, this.#allowedOrigins))
  }

  /**
   * A failed check counts against the client's address; past TOKEN_FAILURES_MAX a minute the answer
   * is 429, so a flood of made-up tokens costs one Redis command each. A valid token costs nothing more.
   * A cookie that names no live session is cleared, so the browser stops sending it.
   */
  async #refuse (request: FastifyRequest, reply: FastifyReply, cookie?: string): Promise<never> {
    if (cookie !== undefined) reply.header('set-cookie', this.fastify.sessionCookieHeader())
    const limit = await this.#failures.fail(request.ip).catch(() => undefined)
    if (limit?.limited === true) {
      reply.header('retry-after', limit.retryAfterSeconds)
      throw new RateLimitedError(`${limit.retryAfterSeconds} seconds`)
    }
    // One answer whatever was wrong with the token: expired, forged, malformed, missing or revoked.
    throw new UnauthorizedError()
  }

  #sessionCookie (request: FastifyRequest): string | undefined {
    const header = request.headers.cookie
    return header === undefined ? undefined : this.fastify.parseCookie(header)[SESSION_COOKIE]
  }
}

async function authentication (fastify: FastifyInstance) {
  const authenticator = new Authenticator(fastify)
  fastify.decorateRequest('session', undefined)
  fastify.decorate(
    'authenticate',
    async (request: FastifyRequest, reply: FastifyReply) => await authenticator.authenticate(request, reply)
  )
  fastify.decorate('authenticateSession', (request: FastifyRequest, reply: FastifyReply) =>
    authenticator.bySession(request, reply, false)
  )
  fastify.addHook('onResponse', async (request, reply) => {
    if (reply.statusCode < 400 && renewIfSucceeded.has(request)) fastify.sessions.renew(request.session!)
  })
  fastify.decorate('requireSameSite', async (request: FastifyRequest) => authenticator.requireSameSite(request))
}

export default fp(authentication, {
  name: 'authentication',
  fastify: '5.x',
  dependencies: ['jwt', 'blacklist', 'sessions', 'cookie', 'redis', 'rate-limit'],
  decorators: { fastify: ['config'] }
})

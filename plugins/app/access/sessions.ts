import { createHash, randomBytes } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import type { Pool } from 'pg'
import { AuthUnavailableError } from '../../../lib/errors.js'
import { Periodic } from '../../../lib/periodic.js'
import type { TokenBlacklist } from './token-blacklist.js'
import { revokedKey, sessionKey } from '../redis-keys.js'

/** The portal's session cookie: `__Host-` makes the browser insist on Secure, Path=/ and no Domain. */
export const SESSION_COOKIE = '__Host-portal-session'

/** A cookie session as the service keeps it. Times in milliseconds since the epoch. */
export interface Session {
  /** The hash of the cookie's value: what Redis and PostgreSQL hold, never the cookie itself. */
  id: string
  clientId: number
  /** The absolute end: sign-in plus SESSION_MAX_AGE_S. */
  expiresAt: number
  /** The end if the session is not used again: its last renewal plus SESSION_IDLE_TIMEOUT_S. */
  idleExpiresAt: number
  identity: SessionIdentity
}

/** Who signed in, and how. */
export interface SessionIdentity {
  signIn: 'password' | 'oidc'
  name: string | null
  email: string | null
  /** The provider's ID token, sealed (never kept in the clear): the hint of its end-session URL. */
  sealedIdToken?: string
}

export interface SessionStoreOptions {
  redis: Redis
  pool: Pool
  blacklist: TokenBlacklist
  prefix: string
  idleTimeoutMs: number
  maxAgeMs: number
  log: FastifyBaseLogger
}

/**
 * Renewals are spaced a tenth of the idle timeout apart, at most a minute: a session in use costs a write
 * that often, not one a request.
 */
const RENEWAL_SHARE = 10
const RENEWAL_MAX_INTERVAL_MS = 60_000
/** Sessions asked after in one MGET (two keys each). */
const ENDED_CHUNK = 1000

// Sets the session's new value if it still holds the value read.
const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`

const hash = (value: string) => createHash('sha256').update(value).digest('base64url')

/**
 * Cookie sessions, and the record of every credential issued (sessions and bearer tokens), so that
 * a client can be signed out everywhere. A live session is a Redis key that expires at its idle or
 * absolute end, whichever comes first. Its end (logout, sign out everywhere) is a revocation in the
 * token blacklist, which PostgreSQL keeps: a Redis that fails over or comes back empty may lose a
 * live session, which signs its user out, but never forgets an ended one.
 */
export class SessionStore {
  readonly renewalIntervalMs: number
  /** Sessions whose renewal this instance is writing: requests that come meanwhile do not write it again. */
  readonly #renewing = new Set<string>()
  /** Each session read, with its value as Redis held it: a renewal writes only over that value. */
  readonly #read = new WeakMap<Session, string>()

  constructor (private readonly options: SessionStoreOptions) {
    this.renewalIntervalMs = Math.min(RENEWAL_MAX_INTERVAL_MS, Math.ceil(options.idleTimeoutMs / RENEWAL_SHARE))
  }

  /** Starts a session for the client; answers the cookie's value, which only the browser keeps. */
  async start (clientId: number, identity: SessionIdentity): Promise<{ cookie: string, session: Session }> {
    const cookie = randomBytes(32).toString('base64url')
    const now = Date.now()
    const session: Session = {
      id: hash(cookie),
      clientId,
      expiresAt: now + this.options.maxAgeMs,
      idleExpiresAt: 0,
      identity
    }
    session.idleExpiresAt = Math.min(now + this.options.idleTimeoutMs, session.expiresAt)
    // Recorded first: a session that exists is one that signing out everywhere can find.
    await this.#record(session.id, 'session', clientId, session.expiresAt)
    await this.options.redis
      .set(this.#key(session.id), serialize(session), 'PX', session.idleExpiresAt - now)
      .catch((error: unknown) => {
        throw new AuthUnavailableError({ cause: error })
      })
    return { cookie, session }
  }

  /** The live session of a cookie, or undefined: unknown, ended, idle or past its age. Reading it does not renew it. */
  async read (cookie: string): Promise<Session | undefined> {
    const id = hash(cookie)
    const { revoked, value } = await this.options.blacklist.lookup(id, this.#key(id))
    if (revoked || value === null) return undefined
    const session = deserialize(id, value)
    const now = Date.now()
    if (session === undefined || now >= session.idleExpiresAt || now >= session.expiresAt) return undefined
    this.#read.set(session, value)
    return session
  }

  /**
   * Extends the idle end of a session this instance read, once the request that read it has
   * succeeded (decision 0089): written at most once a renewal interval, without waiting for it.
   */
  renew (session: Session): void {
    const read = this.#read.get(session)
    const now = Date.now()
    if (read === undefined) return
    const renewedAt = session.idleExpiresAt - this.options.idleTimeoutMs
    if (
      now - renewedAt < this.renewalIntervalMs ||
      session.idleExpiresAt >= session.expiresAt ||
      this.#renewing.has(session.id)
    ) {
      return
    }
    this.#renewing.add(session.id)
    session.idleExpiresAt = Math.min(now + this.options.idleTimeoutMs, session.expiresAt)
    // Written only over the value read: of the instances that read it at once, one writes, and a
    // session ended meanwhile is not brought back. A lost renewal costs the user at most a renewal
    // interval of idle time, so the request does not wait for it.
    this.options.redis.eval(RENEW, 1, this.#key(session.id), read, serialize(session), session.idleExpiresAt - now)
      .catch((error: unknown) => this.options.log.warn({ err: error }, 'session not renewed: Redis is unavailable'))
      .finally(() => this.#renewing.delete(session.id))
  }

  /**
   * Of these sessions, those that have ended: `logged_out` when revoked, `expired` when gone (idled
   * out, past its age, or lost with Redis's data). One MGET a thousand sessions; rejects while
   * Redis cannot answer.
   */
  async ended (ids: string[]): Promise<Map<string, 'logged_out' | 'expired'>> {
    const ended = new Map<string, 'logged_out' | 'expired'>()
    const now = Date.now()
    for (let start = 0; start < ids.length; start += ENDED_CHUNK) {
      const chunk = ids.slice(start, start + ENDED_CHUNK)
      const values = await this.options.redis.mget(
        chunk.flatMap((id) => [revokedKey(this.options.prefix, id), this.#key(id)])
      )
      chunk.forEach((id, index) => {
        const [revoked, value] = [values[2 * index], values[2 * index + 1]]
        const session = value == null ? undefined : deserialize(id, value)
        if (revoked != null) ended.set(id, 'logged_out')
        else if (session === undefined || now >= session.idleExpiresAt || now >= session.expiresAt) {
          ended.set(id, 'expired')
        }
      })
    }
    return ended
  }

  /** Ends the live session a cookie holds, if it holds one: a browser that signs in anew leaves none behind. */
  async endHeldBy (cookie: string | undefined): Promise<void> {
    const session = cookie === undefined ? undefined : await this.read(cookie)
    if (session !== undefined) await this.end(session)
  }

  /** Ends one session on every instance: its SSE streams end with it. */
  async end (session: Pick<Session, 'id' | 'expiresAt'>): Promise<void> {
    await this.options.blacklist.revoke(session.id, Math.ceil(session.expiresAt / 1000))
    // The revocation ends it already; the key would only expire later.
    await this.options.redis.del(this.#key(session.id)).catch(() => {})
  }

  /** Ends every session and revokes every bearer token of the client, on every instance. */
  async endEverywhere (clientId: number): Promise<number> {
    const { rows } = await this.options.pool.query<{ id: string, kind: string, expires: string }>(
      `SELECT id, kind, ceil(extract(epoch FROM expires_at))::bigint AS expires FROM credentials
       WHERE client_id = $1 AND expires_at > now()`, [clientId])
    await Promise.all(rows.map((row) => this.options.blacklist.revoke(row.id, Number(row.expires))))
    const sessions = rows.filter((row) => row.kind === 'session').map((row) => this.#key(row.id))
    if (sessions.length > 0) await this.options.redis.del(...sessions).catch(() => {})
    return rows.length
  }

  /** Records a bearer token as it is issued, so that signing out everywhere revokes it. */
  async recordToken (jti: string, clientId: number, expiresAtSeconds: number): Promise<void> {
    await this.#record(jti, 'token', clientId, expiresAtSeconds * 1000)
  }

  /** Forgets credentials that have expired. */
  async removeExpired (): Promise<void> {
    await this.options.pool.query('DELETE FROM credentials WHERE expires_at < now()')
  }

  async #record (id: string, kind: 'session' | 'token', clientId: number, expiresAtMs: number): Promise<void> {
    await this.options.pool.query(
      'INSERT INTO credentials (id, kind, client_id, expires_at) VALUES ($1, $2, $3, to_timestamp($4::double precision / 1000))',
      [id, kind, clientId, expiresAtMs]
    )
  }

  #key (id: string): string {
    return sessionKey(this.options.prefix, id)
  }
}

// A session of an earlier release holds no identity: it was a password sign-in.
const UNNAMED: SessionIdentity = { signIn: 'password', name: null, email: null }

function serialize (session: Session): string {
  return `${session.clientId}:${session.expiresAt}:${session.idleExpiresAt}:${Buffer.from(JSON.stringify(session.identity)).toString('base64url')}`
}

function deserialize (id: string, value: string): Session | undefined {
  const [clientId, expiresAt, idleExpiresAt, identity] = value.split(':')
  const times = [clientId, expiresAt, idleExpiresAt].map(Number)
  if (!times.every(Number.isSafeInteger)) return undefined
  return {
    id,
    clientId: times[0]!,
    expiresAt: times[1]!,
    idleExpiresAt: times[2]!,
    identity: identity === undefined ? UNNAMED : identityOf(identity)
  }
}

function identityOf (encoded: string): SessionIdentity {
  try {
    return JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8')) as SessionIdentity
  } catch {
    return UNNAMED
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    sessions: SessionStore
    /** The `Set-Cookie` header that hands the browser its session cookie, or, without a value, clears it. */
    sessionCookieHeader (value?: string): string
  }
}

const COOKIE_ATTRIBUTES = { path: '/', httpOnly: true, secure: true, sameSite: 'strict' } as const

// Credentials live at most SESSION_MAX_AGE_S: a few sweeps a day keep the table to the live ones.
const REMOVE_EXPIRED_EVERY_MS = 15 * 60_000

async function sessions (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, SESSION_IDLE_TIMEOUT_S, SESSION_MAX_AGE_S } = fastify.config
  const store = new SessionStore({
    redis: fastify.redis,
    pool: fastify.pg.pool,
    blacklist: fastify.tokenBlacklist,
    prefix: REDIS_KEY_PREFIX,
    idleTimeoutMs: SESSION_IDLE_TIMEOUT_S * 1000,
    maxAgeMs: SESSION_MAX_AGE_S * 1000,
    log: fastify.log
  })
  fastify.decorate('sessions', store)
  fastify.decorate('sessionCookieHeader', (value?: string) => value === undefined
    ? fastify.serializeCookie(SESSION_COOKIE, '', { ...COOKIE_ATTRIBUTES, maxAge: 0, expires: new Date(0) })
    : fastify.serializeCookie(SESSION_COOKIE, value, { ...COOKIE_ATTRIBUTES, maxAge: SESSION_MAX_AGE_S }))
  const sweep = new Periodic(() => store.removeExpired().catch((error: unknown) => {
    fastify.log.warn({ err: error }, 'expired credentials not removed: retried later')
  }), REMOVE_EXPIRED_EVERY_MS)
  fastify.addHook('onClose', () => sweep.stop())
}

export default fp(sessions, {
  name: 'sessions',
  fastify: '5.x',
  dependencies: ['redis', 'postgres', 'database', 'blacklist', 'cookie'],
  decorators: { fastify: ['config'] }
})

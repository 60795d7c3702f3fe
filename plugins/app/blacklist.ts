import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import type { Pool } from 'pg'
import { AuthUnavailableError } from '../../lib/errors.js'
import { abortable } from '../../lib/abortable.js'
import { Periodic } from '../../lib/periodic.js'
import { OutageLog } from '../../lib/outage-log.js'
import { revocationChannel, revocationEpochKey, revokedKey } from './redis-keys.js'
import { databaseOf } from '../external/redis.js'
import type { WindowCount } from '../external/rate-limit.js'

export interface BlacklistStatus {
  mode: 'fail-closed' | 'fail-open'
  /** Whether Redis answered the last blacklist command. */
  available: boolean
  /** Token checks let through while Redis was down (fail-open only), since start. */
  failOpenDecisions: number
}

export interface TokenBlacklistOptions {
  redis: Redis
  /** Holds every revocation until its token expires: Redis is refilled from it. */
  pool: Pool
  prefix: string
  failClosed: boolean
  /** How long a token check waits for Redis to be refilled before it fails as with Redis down. */
  refillWaitMs: number
  log: FastifyBaseLogger
  /** The channel revocations are announced on. */
  announcements: string
}

// Stores one revocation and moves the epoch (the highest revocation number Redis holds) up to its
// number; an absent epoch stays absent, for Redis holds no revocation from before. Answers the epoch.
const REVOKE = `
redis.call('SET', KEYS[1], '1', 'EXAT', ARGV[1])
local epoch = tonumber(redis.call('GET', KEYS[2]))
if epoch == nil then return false end
if tonumber(ARGV[2]) > epoch then redis.call('SET', KEYS[2], ARGV[2]) return tonumber(ARGV[2]) end
return epoch`

// Forward only: instances refilling at once leave the highest of their epochs.
const ADVANCE_EPOCH = `
local epoch = tonumber(redis.call('GET', KEYS[1]))
if epoch == nil or tonumber(ARGV[1]) > epoch then redis.call('SET', KEYS[1], ARGV[1]) return tonumber(ARGV[1]) end
return epoch`

// The credential's revocation and the epoch, as MGET reads them; and, unless it is revoked, the
// request counted in its client's window as @fastify/rate-limit's Redis store counts it: the
// window starts at the first request and lasts ARGV[1] ms.
const LOOKUP_AND_COUNT = {
  numberOfKeys: 3,
  lua: `
local found = redis.call('MGET', KEYS[1], KEYS[2])
if found[1] then return found end
local current = redis.call('INCR', KEYS[3])
local ttl
if current == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
  ttl = tonumber(ARGV[1])
else
  ttl = redis.call('PTTL', KEYS[3])
end
return {found[1], found[2], current, ttl}`
}

/** The client's window to count the request in, with the credential's check (decision 0108). */
export interface CountIn { key: string, windowMs: number }

type LookupAndCount = (revokedKey: string, epochKey: string, countKey: string, windowMs: number) => Promise<[string | null, string | null, number?, number?]>

// Rows outlive their tokens by this much, so that a database clock ahead of the service's never
// drops a revocation the service still needs.
const EXPIRY_MARGIN = '1 minute'
// The highest revocation number handed out: 0 before the first (a new sequence's last_value is its
// start, 1, before any number was taken).
const HIGHEST_NUMBER = 'SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS last FROM revoked_tokens_number'
const REFILL_CHUNK = 1000

/**
 * Revoked access tokens, by `jti`: in PostgreSQL, and in Redis, which token checks read, until the
 * token would have expired anyway. An epoch key in Redis, the highest revocation number it holds,
 * comes with every check: missing, or lower than this instance has seen, Redis lost revocations
 * (restarted empty, failed over to a lagging replica) and is refilled from PostgreSQL before the
 * check answers. While Redis is down, or the refill is not done, a check fails closed (503) or, with
 * AUTH_BLACKLIST_FAIL_CLOSED=false, open.
 */
export class TokenBlacklist {
  #available = true
  #failOpenDecisions = 0
  /**
   * The highest epoch this instance has seen in Redis, or read in PostgreSQL at start: a process
   * that started after its Redis went back in time still knows where it stood.
   */
  #epoch = 0
  /** Whether #epoch holds PostgreSQL's highest number yet; until it does, a check refills Redis first. */
  #floorRead = false
  #refills = 0
  #refilling: Promise<void> | undefined
  readonly #epochKey: string
  /** One line when Redis stops answering the blacklist and one when it answers again, not one per request. */
  readonly #outage: OutageLog

  readonly #lookupAndCount: LookupAndCount

  constructor (private readonly options: TokenBlacklistOptions) {
    this.#epochKey = revocationEpochKey(options.prefix)
    // A script of ioredis's: sent by its hash, its text only the first time a Redis lacks it.
    options.redis.defineCommand('blacklistLookupAndCount', LOOKUP_AND_COUNT)
    this.#lookupAndCount = (options.redis as unknown as { blacklistLookupAndCount: LookupAndCount }).blacklistLookupAndCount.bind(options.redis)
    this.#outage = new OutageLog(options.log, 'token blacklist: Redis', {
      consequence: options.failClosed ? 'fail closed: token checks, sign-ins and logouts answer 503' : 'fail open: token checks pass unverified, counted; logouts answer 503'
    })
  }

  /** Stores the revocation, in PostgreSQL first, then Redis; then announces it: every instance ends the token's SSE streams. */
  async revoke (jti: string, expiresAtSeconds: number): Promise<void> {
    const { redis, pool, announcements, log } = this.options
    const { rows } = await pool.query<{ number: string }>(
      `INSERT INTO revoked_tokens (jti, expires_at) VALUES ($1, to_timestamp($2))
       ON CONFLICT (jti) DO UPDATE SET expires_at = EXCLUDED.expires_at RETURNING number`,
      [jti, expiresAtSeconds])
    try {
      const epoch = await redis.eval(REVOKE, 2, this.#key(jti), this.#epochKey, String(expiresAtSeconds), rows[0]!.number)
      if (epoch !== null) this.#saw(Number(epoch))
      this.#available = true
      this.#outage.recovered()
    } catch (error) {
      this.#available = false
      this.#outage.error(error)
      throw new AuthUnavailableError({ cause: error })
    }
    await redis.publish(announcements, jti).catch((error: unknown) => {
      log.warn({ err: error }, 'revocation stored but not announced: open SSE streams of the token end at its expiry')
    })
  }

  async isRevoked (jti: string): Promise<boolean> {
    return (await this.lookup(jti)).revoked
  }

  /**
   * Whether an access token is revoked, and, unless it is, its request counted in the client's
   * window by the same script: one command for both. The count is undefined for a revoked token,
   * which is not counted, and the error when Redis could not take it (the check then fails only
   * if `lookup`'s would).
   */
  async lookupAndCount (jti: string, count: CountIn): Promise<{ revoked: boolean, count: WindowCount | Error | undefined }> {
    const refillsBefore = this.#refills
    let answer: Awaited<ReturnType<LookupAndCount>>
    try {
      answer = await this.#lookupAndCount(this.#key(jti), this.#epochKey, count.key, count.windowMs)
    } catch (error) {
      // Refused for its count (a write, which Redis at maxmemory refuses) or not: the check, which
      // only reads, is asked alone, and fails only if that fails too.
      return { revoked: (await this.lookup(jti)).revoked, count: error instanceof Error ? error : new Error(String(error)) }
    }
    const [revoked = null, epoch = null, current, ttl] = answer
    return {
      revoked: await this.#revoked(jti, revoked, epoch, false, refillsBefore),
      count: current === undefined || ttl === undefined ? undefined : { current, ttl }
    }
  }

  /**
   * Whether a credential is revoked, and the value of a key of its own (a cookie session's state)
   * read in the same command: one round trip for both. While Redis cannot answer, a credential
   * that needs its own key cannot pass open: there is nothing to let through.
   */
  async lookup (jti: string, ownKey?: string): Promise<{ revoked: boolean, value: string | null }> {
    const refillsBefore = this.#refills
    let found: Array<string | null>
    try {
      // The epoch comes in the same command: noticing a loss costs no round trip.
      found = ownKey === undefined
        ? await this.options.redis.mget(this.#key(jti), this.#epochKey)
        : await this.options.redis.mget(this.#key(jti), this.#epochKey, ownKey)
    } catch (error) {
      return { revoked: this.#unavailable(error, ownKey !== undefined), value: null }
    }
    const [revoked = null, epoch = null, value = null] = found
    return { revoked: await this.#revoked(jti, revoked, epoch, ownKey !== undefined, refillsBefore), value }
  }

  /**
   * The answer to a check, from what Redis held: the revocation key and the epoch. An epoch missing
   * or behind means Redis lost revocations: it is refilled, and the key asked again.
   */
  #revoked (jti: string, revoked: string | null, epoch: string | null, closed: boolean, refillsBefore: number): boolean | Promise<boolean> {
    this.#available = true
    this.#outage.recovered()
    if (revoked !== null) return true
    if (epoch !== null && this.#floorRead && Number(epoch) >= this.#epoch) {
      this.#epoch = Number(epoch)
      return false
    }
    return this.#refillAndAsk(jti, epoch === null ? 'missing' : 'behind', closed, refillsBefore)
  }

  async #refillAndAsk (jti: string, found: 'missing' | 'behind', closed: boolean, refillsBefore: number): Promise<boolean> {
    try {
      // A refill that ended since the command was sent has put back what this one missed.
      if (this.#refills === refillsBefore) await abortable(this.#refill(found), AbortSignal.timeout(this.options.refillWaitMs))
      return (await this.options.redis.exists(this.#key(jti))) === 1
    } catch (error) {
      return this.#unavailable(error, closed)
    }
  }

  /**
   * At start: a Redis without the epoch (new, or emptied while the service was down), or with one
   * lower than the highest revocation number PostgreSQL holds (restored from an older copy, failed
   * over to a lagging replica while the service was down), is refilled now (decision 0090).
   */
  async prepare (): Promise<void> {
    const { rows: [highest] } = await this.options.pool.query<{ last: string }>(HIGHEST_NUMBER)
    const epoch = await this.options.redis.get(this.#epochKey)
    this.#saw(Number(highest!.last))
    if (epoch === null) await this.#refill('missing', true)
    else if (Number(epoch) < this.#epoch) await this.#refill('behind', true)
    else this.#saw(Number(epoch))
    this.#floorRead = true
  }

  /** Forgets revocations of tokens that have expired. */
  async removeExpired (): Promise<void> {
    await this.options.pool.query(`DELETE FROM revoked_tokens WHERE expires_at < now() - interval '${EXPIRY_MARGIN}'`)
  }

  /**
   * Before a token is issued: failing closed, Redis must answer, or the token could not be checked
   * on its first use anyway (the specification: when the cache fails, authentication fails).
   */
  async ensureCheckable (): Promise<void> {
    if (!this.options.failClosed) return
    try {
      await this.options.redis.ping()
      this.#available = true
      this.#outage.recovered()
    } catch (error) {
      this.#available = false
      this.#outage.error(error)
      throw new AuthUnavailableError({ cause: error })
    }
  }

  status (): BlacklistStatus {
    return { mode: this.options.failClosed ? 'fail-closed' : 'fail-open', available: this.#available, failOpenDecisions: this.#failOpenDecisions }
  }

  #unavailable (error: unknown, closed = false): false {
    this.#available = false
    this.#outage.error(error)
    if (this.options.failClosed || closed) throw new AuthUnavailableError({ cause: error })
    this.#failOpenDecisions++
    return false
  }

  /** One refill at a time in this instance; another instance's at the same time writes the same keys. */
  #refill (found: 'missing' | 'behind', atStart = false): Promise<void> {
    this.#refilling ??= this.#refillFromDatabase(found, atStart).finally(() => { this.#refilling = undefined })
    return this.#refilling
  }

  async #refillFromDatabase (found: 'missing' | 'behind', atStart: boolean): Promise<void> {
    const { redis, pool, log } = this.options
    // Read before the rows: a revocation numbered up to it is among them, or not committed yet, and
    // then its own revoke() writes it to this Redis.
    const { rows: [sequence] } = await pool.query<{ last: string }>(HIGHEST_NUMBER)
    const { rows } = await pool.query<{ jti: string, expires: string }>(
      `SELECT jti, extract(epoch FROM expires_at)::bigint AS expires FROM revoked_tokens WHERE expires_at > now() - interval '${EXPIRY_MARGIN}'`)
    const details = { revocations: rows.length, epochSeen: this.#epoch }
    if (found === 'behind') {
      log.warn(details, `Redis holds fewer revocations than PostgreSQL (restored from an older copy, or failed over to a lagging replica?): refilling ${rows.length} revocations from PostgreSQL`)
    } else {
      // A new Redis at start with nothing to refill is no news.
      log[atStart && rows.length === 0 ? 'info' : 'warn'](details, `Redis holds no revocations (new, restarted empty or emptied): refilling ${rows.length} revocations from PostgreSQL`)
    }
    for (let start = 0; start < rows.length; start += REFILL_CHUNK) {
      const pipeline = redis.pipeline()
      for (const row of rows.slice(start, start + REFILL_CHUNK)) pipeline.set(this.#key(row.jti), '1', 'EXAT', row.expires)
      const failure = (await pipeline.exec())?.find(([error]) => error !== null)?.[0]
      if (failure != null) throw failure
    }
    this.#saw(Number(await redis.eval(ADVANCE_EPOCH, 1, this.#epochKey, sequence!.last)))
    this.#floorRead = true
    this.#refills++
  }

  #saw (epoch: number): void {
    if (epoch > this.#epoch) this.#epoch = epoch
  }

  #key (jti: string): string {
    return revokedKey(this.options.prefix, jti)
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    tokenBlacklist: TokenBlacklist
  }
}

declare module './monitoring/index.js' {
  interface MonitoringParts {
    /** A security setting and its effect: for the operators' eyes only. */
    blacklist: BlacklistStatus
  }
}

// Revocations live as long as their tokens (ACCESS_TOKEN_TTL_SECONDS, at most a day): a few
// sweeps a day keep the table to the live ones and a little more.
const REMOVE_EXPIRED_EVERY_MS = 15 * 60_000

async function blacklist (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, AUTH_BLACKLIST_FAIL_CLOSED, REDIS_COMMAND_TIMEOUT_MS } = fastify.config
  const blacklist = new TokenBlacklist({
    redis: fastify.redis,
    pool: fastify.pg.pool,
    prefix: REDIS_KEY_PREFIX,
    failClosed: AUTH_BLACKLIST_FAIL_CLOSED,
    refillWaitMs: REDIS_COMMAND_TIMEOUT_MS,
    log: fastify.log,
    announcements: revocationChannel(REDIS_KEY_PREFIX, databaseOf(fastify.redis))
  })
  fastify.decorate('tokenBlacklist', blacklist)
  await blacklist.prepare().catch((error: unknown) => {
    fastify.log.warn({ err: error }, 'revocations in Redis not checked at start: the first token check does it')
  })
  const sweep = new Periodic(() => blacklist.removeExpired().catch((error: unknown) => {
    fastify.log.warn({ err: error }, 'expired revocations not removed: retried later')
  }), REMOVE_EXPIRED_EVERY_MS)
  await sweep.run()
  fastify.addHook('onClose', () => sweep.stop())
  fastify.monitoring.register('blacklist', {
    description: 'the token blacklist',
    read: () => blacklist.status(),
    metrics: [
      { name: 'portal_bff_token_blacklist_available', help: 'Whether the last token blacklist command reached Redis (1) or not (0)', type: 'gauge', samples: ({ available }) => [{ value: available ? 1 : 0 }] },
      {
        name: 'portal_bff_token_checks_failed_open_total',
        help: 'Token checks let through unverified while Redis was down (AUTH_BLACKLIST_FAIL_CLOSED=false)',
        type: 'counter',
        samples: ({ failOpenDecisions }) => [{ value: failOpenDecisions }]
      }
    ]
  })
}

export default fp(blacklist, { name: 'blacklist', fastify: '5.x', dependencies: ['redis', 'postgres', 'db', 'monitoring'], decorators: { fastify: ['config'] } })

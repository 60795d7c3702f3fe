import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import type { Pool } from 'pg'
import { AuthUnavailableError } from '../../../lib/errors.js'
import { abortable } from '../../../lib/abortable.js'
import { OutageLog } from '../../../lib/outage-log.js'
import { revocationEpochKey, revokedKey } from '../redis-keys.js'
import type { WindowCount } from '../../external/rate-limit.js'
import * as commands from './blacklist-commands.js'

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

  readonly #lookupAndCount: commands.LookupAndCount

  constructor (private readonly options: TokenBlacklistOptions) {
    this.#epochKey = revocationEpochKey(options.prefix)
    this.#lookupAndCount = commands.defineLookupAndCount(options.redis)
    this.#outage = new OutageLog(options.log, 'token blacklist: Redis', {
      consequence: options.failClosed
        ? 'fail closed: token checks, sign-ins and logouts answer 503'
        : 'fail open: token checks pass unverified, counted; logouts answer 503'
    })
  }

  /**
   * Stores the revocation, in PostgreSQL first, then Redis; then announces it: every instance ends the
   * token's SSE streams.
   */
  async revoke (jti: string, expiresAtSeconds: number): Promise<void> {
    const { redis, pool, announcements, log } = this.options
    const number = await commands.insertRevocation(pool, jti, expiresAtSeconds)
    try {
      const epoch = await commands.storeRevocation(redis, this.#key(jti), this.#epochKey, expiresAtSeconds, number)
      if (epoch !== null) this.#saw(epoch)
      this.#answered()
    } catch (error) {
      this.#unavailable(error, true)
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
  async lookupAndCount (
    jti: string,
    count: commands.CountIn
  ): Promise<{ revoked: boolean, count: WindowCount | Error | undefined }> {
    const refillsBefore = this.#refills
    let answer: Awaited<ReturnType<commands.LookupAndCount>>
    try {
      answer = await this.#lookupAndCount(this.#key(jti), this.#epochKey, count.key, count.windowMs)
    } catch (error) {
      // Refused for its count (a write, which Redis at maxmemory refuses) or not: the check, which
      // only reads, is asked alone, and fails only if that fails too.
      return {
        revoked: (await this.lookup(jti)).revoked,
        count: error instanceof Error ? error : new Error(String(error))
      }
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
  #revoked (
    jti: string,
    revoked: string | null,
    epoch: string | null,
    closed: boolean,
    refillsBefore: number
  ): boolean | Promise<boolean> {
    this.#answered()
    if (revoked !== null) return true
    if (epoch !== null && this.#floorRead && Number(epoch) >= this.#epoch) {
      this.#epoch = Number(epoch)
      return false
    }
    return this.#refillAndAsk(jti, epoch === null ? 'missing' : 'behind', closed, refillsBefore)
  }

  async #refillAndAsk (
    jti: string,
    found: 'missing' | 'behind',
    closed: boolean,
    refillsBefore: number
  ): Promise<boolean> {
    try {
      // A refill that ended since the command was sent has put back what this one missed.
      if (this.#refills === refillsBefore) {
        await abortable(this.#refill(found), AbortSignal.timeout(this.options.refillWaitMs))
      }
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
    const highest = await commands.highestRevocationNumber(this.options.pool)
    const epoch = await this.options.redis.get(this.#epochKey)
    this.#saw(Number(highest))
    if (epoch === null) await this.#refill('missing', true)
    else if (Number(epoch) < this.#epoch) await this.#refill('behind', true)
    else this.#saw(Number(epoch))
    this.#floorRead = true
  }

  /** Forgets revocations of tokens that have expired. */
  async removeExpired (): Promise<void> {
    await commands.deleteExpiredRevocations(this.options.pool)
  }

  /**
   * Before a token is issued: failing closed, Redis must answer, or the token could not be checked
   * on its first use anyway (the specification: when the cache fails, authentication fails).
   */
  async ensureCheckable (): Promise<void> {
    if (!this.options.failClosed) return
    try {
      await this.options.redis.ping()
      this.#answered()
    } catch (error) {
      this.#unavailable(error, true)
    }
  }

  status (): BlacklistStatus {
    return {
      mode: this.options.failClosed ? 'fail-closed' : 'fail-open',
      available: this.#available,
      failOpenDecisions: this.#failOpenDecisions
    }
  }

  /** Redis answered: an outage it was in is over. */
  #answered (): void {
    this.#available = true
    this.#outage.recovered()
  }

  /** Redis failed: fails closed (AUTH_UNAVAILABLE) when told to or when `closed`, else counts an open decision. */
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
    const highest = await commands.highestRevocationNumber(pool)
    const rows = await commands.liveRevocations(pool)
    const details = { revocations: rows.length, epochSeen: this.#epoch }
    if (found === 'behind') {
      log.warn(details, `Redis holds fewer revocations than PostgreSQL (restored from an older copy, or failed over to a lagging replica?): refilling ${rows.length} revocations from PostgreSQL`)
    } else {
      // A new Redis at start with nothing to refill is no news.
      log[atStart && rows.length === 0 ? 'info' : 'warn'](details, `Redis holds no revocations (new, restarted empty or emptied): refilling ${rows.length} revocations from PostgreSQL`)
    }
    await commands.writeRevocations(redis, (jti) => this.#key(jti), rows)
    this.#saw(await commands.advanceEpoch(redis, this.#epochKey, highest))
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

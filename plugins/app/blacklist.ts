import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { AuthUnavailableError } from '../../lib/errors.js'
import { revocationChannel } from './event-streams.js'

export interface BlacklistStatus {
  mode: 'fail-closed' | 'fail-open'
  /** Whether Redis answered the last blacklist command. */
  available: boolean
  /** Token checks let through while Redis was down (fail-open only), since start. */
  failOpenDecisions: number
}

/**
 * Revoked access tokens, by `jti`, in Redis until the token would have expired anyway. While
 * Redis is down a check fails closed (503) or, with AUTH_BLACKLIST_FAIL_CLOSED=false, open.
 */
export class TokenBlacklist {
  #available = true
  #failOpenDecisions = 0

  constructor (
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly failClosed: boolean,
    private readonly log: FastifyBaseLogger,
    /** The channel revocations are announced on. */
    private readonly announcements: string
  ) {}

  /** Stores the revocation, then announces it: every instance ends the token's event streams. */
  async revoke (jti: string, expiresAtSeconds: number): Promise<void> {
    try {
      await this.redis.set(this.#key(jti), '1', 'EXAT', expiresAtSeconds)
      this.#available = true
    } catch (error) {
      this.#available = false
      throw new AuthUnavailableError({ cause: error })
    }
    await this.redis.publish(this.announcements, jti).catch((error: unknown) => {
      this.log.warn({ err: error }, 'revocation stored but not announced: open event streams of the token end at its expiry')
    })
  }

  async isRevoked (jti: string): Promise<boolean> {
    try {
      const revoked = (await this.redis.exists(this.#key(jti))) === 1
      this.#available = true
      return revoked
    } catch (error) {
      this.#available = false
      if (this.failClosed) {
        this.log.error({ err: error }, 'token blacklist unavailable: request refused (fail closed)')
        throw new AuthUnavailableError({ cause: error })
      }
      this.#failOpenDecisions++
      this.log.warn({ err: error, failOpenDecisions: this.#failOpenDecisions }, 'token blacklist unavailable: request let through (fail open)')
      return false
    }
  }

  /**
   * Before a token is issued: failing closed, Redis must answer, or the token could not be checked
   * on its first use anyway (the specification: when the cache fails, authentication fails).
   */
  async ensureCheckable (): Promise<void> {
    if (!this.failClosed) return
    try {
      await this.redis.ping()
      this.#available = true
    } catch (error) {
      this.#available = false
      this.log.error({ err: error }, 'token blacklist unavailable: sign-in refused (fail closed)')
      throw new AuthUnavailableError({ cause: error })
    }
  }

  status (): BlacklistStatus {
    return { mode: this.failClosed ? 'fail-closed' : 'fail-open', available: this.#available, failOpenDecisions: this.#failOpenDecisions }
  }

  #key (jti: string): string {
    return `${this.prefix}auth:blacklist:${jti}`
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

async function blacklist (fastify: FastifyInstance) {
  const { REDIS_KEY_PREFIX, AUTH_BLACKLIST_FAIL_CLOSED } = fastify.config
  const blacklist = new TokenBlacklist(fastify.redis, REDIS_KEY_PREFIX, AUTH_BLACKLIST_FAIL_CLOSED, fastify.log, revocationChannel(REDIS_KEY_PREFIX))
  fastify.decorate('tokenBlacklist', blacklist)
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

export default fp(blacklist, { name: 'blacklist', fastify: '5.x', dependencies: ['redis', 'monitoring'], decorators: { fastify: ['config'] } })

import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { Periodic } from '../../../lib/periodic.js'
import { revocationChannel } from '../redis-keys.js'
import { databaseOf } from '../../external/redis-connection.js'
import { TokenBlacklist, type BlacklistStatus } from './token-blacklist.js'

declare module 'fastify' {
  interface FastifyInstance {
    tokenBlacklist: TokenBlacklist
  }
}

declare module '../monitoring/index.js' {
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
      {
        name: 'portal_bff_token_blacklist_available',
        help: 'Whether the last token blacklist command reached Redis (1) or not (0)',
        type: 'gauge',
        samples: ({ available }) => [{ value: available ? 1 : 0 }]
      },
      {
        name: 'portal_bff_token_checks_failed_open_total',
        help: 'Token checks let through unverified while Redis was down (AUTH_BLACKLIST_FAIL_CLOSED=false)',
        type: 'counter',
        samples: ({ failOpenDecisions }) => [{ value: failOpenDecisions }]
      }
    ]
  })
}

export default fp(blacklist, {
  name: 'blacklist',
  fastify: '5.x',
  dependencies: ['redis', 'postgres', 'database', 'monitoring'],
  decorators: { fastify: ['config'] }
})

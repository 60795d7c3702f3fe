import fp from 'fastify-plugin'
import fastifyRedis from '@fastify/redis'
import { Redis } from 'ioredis'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Config } from '../../schemas/config.js'
import { abortable } from '../../lib/abortable.js'
import { describeCause } from '../../lib/errors.js'
import { closeRedis, reconnectDelay, redisConnectionOptions } from './redis-connection.js'

/** How long a start waits for Redis: a few reconnection attempts, so that one starting alongside is found. */
export const STARTUP_CONNECT_MS = 3000

async function configValue (client: Redis, name: string): Promise<string> {
  const [, value] = await client.config('GET', name) as Array<string | undefined>
  if (value === undefined) throw new Error(`CONFIG GET ${name} answered nothing`)
  return value
}

/**
 * What makes Redis lose keys the service relies on, each with its remedy: eviction (BullMQ's job
 * queue requires noeviction) and no persistence at all.
 */
async function volatility (client: Redis): Promise<string[]> {
  const [policy, appendonly, save] = await Promise.all([
    configValue(client, 'maxmemory-policy'),
    configValue(client, 'appendonly'),
    configValue(client, 'save')
  ])
  const problems: string[] = []
  if (policy !== 'noeviction') {
    problems.push(`Redis may evict keys: maxmemory-policy is ${policy}, and the provisioning job queue (BullMQ), token revocations and sign-in limits must never be dropped; set maxmemory-policy noeviction`)
  }
  if (appendonly !== 'yes' && save.trim() === '') {
    problems.push(
      'Redis keeps nothing across a restart: appendonly is no and save is empty, so a restart loses queued provisioning jobs and sign-in limits; set appendonly yes'
    )
  }
  return problems
}

/**
 * Warns of a Redis that may lose keys; in production refuses to start on one, unless REDIS_ALLOW_VOLATILE accepts it.
 */
async function checkWhatRedisKeeps (client: Redis, config: Config, log: FastifyBaseLogger): Promise<void> {
  let problems: string[]
  try {
    problems = await volatility(client)
  } catch (error) {
    // Managed Redis services often rename or forbid CONFIG.
    log.warn(
      { err: error },
      'could not check what Redis keeps (CONFIG GET refused): make sure its maxmemory-policy is noeviction and appendonly or save is on'
    )
    return
  }
  if (problems.length === 0) return
  if (config.isProduction && !config.REDIS_ALLOW_VOLATILE) {
    throw new Error(`${problems.join('. ')}. REDIS_ALLOW_VOLATILE=true starts the service anyway`)
  }
  for (const problem of problems) log.warn(problem)
}

/** Where the service looks for Redis, and the setting that says so, for a message: never the credentials. */
export function redisWhereabouts (config: Pick<Config, 'REDIS_URL' | 'redisSentinel'>): string {
  const { redisSentinel } = config
  if (redisSentinel !== undefined) {
    const sentinels = redisSentinel.sentinels.map(({ host, port }) => `${host.includes(':') ? `[${host}]` : host}:${port}`).join(',')
    return `Redis '${redisSentinel.name}' of the Sentinels at ${sentinels} (REDIS_SENTINELS, REDIS_SENTINEL_NAME)`
  }
  const url = new URL(config.REDIS_URL)
  return `Redis at ${url.hostname}:${url.port || 6379} (REDIS_URL)`
}

/**
 * The client's first connection, within STARTUP_CONNECT_MS: a Redis that cannot be reached fails
 * the start naming where it was looked for and why, rather than holding it until the plugin timeout.
 */
async function firstConnection (client: Redis, config: Config): Promise<void> {
  let cause: unknown
  const onError = (error: unknown) => { cause = error }
  client.on('error', onError)
  try {
    await abortable(
      new Promise<void>((resolve) => client.once('ready', () => resolve())),
      AbortSignal.timeout(STARTUP_CONNECT_MS)
    )
  } catch {
    client.disconnect()
    throw new Error(`${redisWhereabouts(config)} cannot be reached within ${STARTUP_CONNECT_MS / 1000} s: ${describeCause(cause) ?? 'no answer'}`)
  } finally {
    client.off('error', onError)
  }
}

async function redis (fastify: FastifyInstance) {
  const { config } = fastify
  const client = new Redis({
    ...redisConnectionOptions(config),
    connectionName: config.SERVICE_NAME,
    // No CLIENT SETINFO on connect: when Redis goes away mid-handshake its rejection escapes ioredis.
    disableClientInfo: true,
    // Commands fail at once while Redis is away (a failover included) instead of queueing, and a
    // hung server cannot hold a command longer than the command timeout.
    enableOfflineQueue: false,
    commandTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
    maxRetriesPerRequest: 1,
    retryStrategy: reconnectDelay,
    // The commands of concurrent requests (token check, rate limit, cache read) issued in one tick
    // go out in one write: under load a write per command is most of what a cached read costs.
    enableAutoPipelining: true
  })
  await firstConnection(client, config)
  // @fastify/redis closes its client with QUIT alone, which rejects while Redis is down and
  // leaves the reconnect timer running; this plugin closes the client itself.
  await fastify.register(fastifyRedis, { client, closeClient: false })
  fastify.addHook('onClose', () => closeRedis(client))
  await checkWhatRedisKeeps(client, config, fastify.log)
}

export default fp(redis, { name: 'redis', fastify: '5.x', decorators: { fastify: ['config'] } })

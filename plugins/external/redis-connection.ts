import { Redis, SentinelConnector, type RedisOptions, type SentinelConnectionOptions } from 'ioredis'
import type { Config } from '../../schemas/config.js'
import { abortable } from '../../lib/abortable.js'

// How every Redis client of the service connects, reconnects and says goodbye: the redis plugin's
// client, the pub/sub connection, BullMQ's. A module of its own, so that none imports the plugin.

const MAX_RECONNECT_DELAY_MS = 2000

// How long a goodbye to Redis may take before the connection is simply dropped.
const QUIT_TIMEOUT_MS = 1000

/** Delay before reconnection attempt `attempt` (from 1): quick at first, never more than 2 s apart. */
export function reconnectDelay (attempt: number): number {
  return Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS)
}

/** The parts of ioredis 5.10's failover detector (private to its Sentinel connector) used below. */
interface FailoverDetector {
  sentinels: Array<{ client: Redis }>
  /** Set once the detector is cleaned up or has announced a failover (which cleans it up). */
  isDisconnected: boolean
  cleanup: () => void
}

/**
 * ioredis's Sentinel connector, with its failover detector (a subscription of its own to each
 * Sentinel) tidied: ioredis ends the detector only on disconnect(), so a client closed with QUIT,
 * as BullMQ closes its worker's connection, would keep the process alive; and the detector's
 * connections have no error listener, so a Sentinel down would print to stderr every minute.
 */
class TidySentinelConnector extends SentinelConnector {
  // ioredis hands a connector the client's options untyped.
  constructor (options: unknown) {
    super(options as SentinelConnectionOptions)
  }

  override async connect (...args: Parameters<SentinelConnector['connect']>): ReturnType<SentinelConnector['connect']> {
    const stream = await super.connect(...args)
    const detector = () => (this as unknown as { failoverDetector: FailoverDetector | null }).failoverDetector
    // ioredis makes this stream's detector on the same event, in a listener added before this one.
    const connected =
      this.options.enableTLSForSentinelMode === true && this.options.tls !== undefined ? 'secureConnect' : 'connect'
    let own: FailoverDetector | null = null
    stream.once(connected, () => {
      own = detector()
      // Nothing to report: failing to reach a Sentinel shows when the primary is looked up.
      for (const { client } of own?.sentinels ?? []) client.on('error', () => {})
    })
    // Only a stream that connected has a detector of its own, cleaned once: each cleanup adds a
    // 'close' listener to every Sentinel connection, and a stream refused while Redis is down would
    // otherwise clean the last connected stream's detector again on every reconnection attempt.
    stream.once('close', () => {
      if (own !== null && !own.isDisconnected) own.cleanup()
    })
    return stream
  }
}

/** The database a Redis client's keys live in (REDIS_URL's path): part of every pub/sub channel's name. */
export const databaseOf = (redis: Pick<Redis, 'options'>): number => redis.options.db ?? 0

/**
 * Where Redis is and how a connection follows it, for every Redis client of the service; each
 * client adds its own command behaviour. With REDIS_SENTINELS the Sentinels name the primary and
 * REDIS_URL gives only the credentials and the database; otherwise REDIS_URL is Redis.
 */
export function redisConnectionOptions (
  config: Pick<Config, 'REDIS_URL' | 'REDIS_COMMAND_TIMEOUT_MS' | 'redisSentinel'>
): RedisOptions {
  const url = new URL(config.REDIS_URL)
  const tls = url.protocol === 'rediss:'
  const common: RedisOptions = {
    username: decodeURIComponent(url.username) || undefined,
    password: decodeURIComponent(url.password) || undefined,
    db: Number(url.pathname.slice(1) || 0),
    connectTimeout: config.REDIS_COMMAND_TIMEOUT_MS * 2,
    // A connection dropped while its server hangs (a failover announced, a close) is destroyed
    // after one command timeout rather than ioredis's 2 s.
    disconnectTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
    // A connection may reach a node that has become a replica (an old primary back, a managed
    // Redis failing over behind one host name): its writes are refused with READONLY. Reconnecting
    // finds the primary; clients with an offline queue (BullMQ's, the subscribers) also send the
    // refused command again there, the others fail it at once.
    reconnectOnError: (error) => error.message.startsWith('READONLY') ? 2 : false
  }
  const { redisSentinel } = config
  if (redisSentinel === undefined) {
    return { ...common, host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(url.port || 6379), ...(tls && { tls: {} }) }
  }
  return {
    ...common,
    sentinels: redisSentinel.sentinels,
    name: redisSentinel.name,
    sentinelPassword: redisSentinel.password,
    // rediss: the primary's connection is TLS (ioredis names that option for Sentinel mode); the Sentinels' is not.
    ...(tls && { tls: {}, enableTLSForSentinelMode: true }),
    // A hung Sentinel must not hold the search for the primary: the next one is asked.
    sentinelCommandTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
    sentinelRetryStrategy: reconnectDelay,
    // Sentinels announce a failover (+switch-master), and connections are dropped then: an old
    // primary that hangs or is cut off without a reset (host lost, partition) closes none of them,
    // and its commands would only time out until TCP gave up.
    failoverDetector: true,
    // Duplicates (the subscribers, BullMQ's blocking connection) inherit it with the other options.
    Connector: TidySentinelConnector
  }
}

/** QUIT when Redis answers in time; otherwise drop the connection and stop reconnecting. */
export async function closeRedis (client: Redis): Promise<void> {
  if (client.status === 'ready') {
    try {
      await abortable(client.quit(), AbortSignal.timeout(QUIT_TIMEOUT_MS))
      return
    } catch {
      // Redis hung or went away while we said goodbye.
    }
  }
  client.disconnect()
}

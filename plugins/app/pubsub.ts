import { once } from 'node:events'
import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'

export type MessageHandler = (message: string) => void

/**
 * Redis pub/sub for every plugin of the instance, on one connection of its own (a connection in
 * subscriber mode can do nothing else). Each channel is subscribed once, whatever the number of
 * handlers, and again after every reconnection. Publishing needs no such connection: the shared
 * client does it.
 */
export class PubSub {
  readonly #handlers = new Map<string, MessageHandler[]>()
  readonly #lost = new Set<() => void>()

  constructor (private readonly connection: Redis, log: FastifyBaseLogger) {
    connection.on('message', (channel: string, message: string) => {
      for (const handler of this.#handlers.get(channel) ?? []) handler(message)
    })
    // ioredis's own resubscription leaves its promise unhandled when the connection drops again at
    // once, which would end the process: the connection is made without it, and this does it.
    connection.on('ready', () => {
      if (this.#handlers.size === 0) return
      connection
        .subscribe(...this.#handlers.keys())
        .catch((error: unknown) =>
          log.warn({ err: error }, 'pub/sub: resubscription failed; retried on the next reconnection')
        )
    })
    connection.on('close', () => { for (const listener of this.#lost) listener() })
  }

  /** Calls `handler` with each message on `channel` from now on; resolves once Redis has confirmed the subscription. */
  async subscribe (channel: string, handler: MessageHandler): Promise<void> {
    const handlers = this.#handlers.get(channel)
    if (handlers !== undefined) {
      handlers.push(handler)
      return
    }
    this.#handlers.set(channel, [handler])
    if (this.connection.status !== 'ready') await once(this.connection, 'ready')
    await this.connection.subscribe(channel)
  }

  /** Calls `listener` whenever the connection is lost: messages published meanwhile never arrive. */
  onLost (listener: () => void): void {
    this.#lost.add(listener)
  }

  /**
   * Whether Redis still answers on the connection messages arrive on. A hung Redis keeps its socket
   * open, so no connection event says that it has failed.
   */
  async ping (): Promise<void> {
    await this.connection.ping()
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    pubsub: PubSub
  }
}

async function pubsub (fastify: FastifyInstance) {
  // An offline queue: a subscription asked for while Redis is away is sent once it is back.
  const connection = fastify.redis.duplicate({ enableOfflineQueue: true, autoResubscribe: false })
  // The shared client's connection-state lines (the redis-check plugin) tell of Redis going away.
  connection.on('error', () => {})
  fastify.decorate('pubsub', new PubSub(connection, fastify.log))
  // A subscriber has nothing to finish: dropped at once, it adds no wait on a hung Redis.
  fastify.addHook('onClose', async () => { connection.disconnect() })
}

export default fp(pubsub, { name: 'pubsub', fastify: '5.x', dependencies: ['redis'] })

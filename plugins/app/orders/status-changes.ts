import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { abortable } from '../../../lib/abortable.js'
import { SseFrameRefusedError } from '../../../lib/errors.js'
import { sseFrameProblems, type OrderStatusEvent } from '../../../schemas/sse-events.js'
import type { Order } from './store.js'
import { orderStatusBacklogKey, orderStatusChannel } from '../redis-keys.js'
import { databaseOf } from '../../external/redis-connection.js'
import type { PubSub } from '../pubsub.js'

/** What an SSE client sees when one of its orders changes status: the `order.status` event and its id. */
export interface OrderStatusChange extends OrderStatusEvent {
  /** The Redis stream entry id: the SSE `id:`, from which `Last-Event-ID` resumes. */
  id: string
}

/** The `order.status` frame of an order, checked against its schema: one that breaks it is refused before Redis. */
export function orderStatusFrame (
  order: Pick<Order, 'id' | 'crmOrderId' | 'status' | 'failureReason' | 'updatedAt'>
): OrderStatusEvent {
  const event = {
    orderId: order.id,
    crmOrderId: order.crmOrderId,
    status: order.status,
    failureReason: order.failureReason,
    at: order.updatedAt
  }
  const problems = sseFrameProblems('order.status', event)
  if (problems.length > 0) throw new SseFrameRefusedError('order.status', problems.join('; '))
  return event
}

/** A frame read back from Redis, through its schema; undefined when it is no `order.status` frame. */
function readFrame (id: unknown, json: string | undefined): OrderStatusChange | undefined {
  try {
    const data: unknown = JSON.parse(json ?? '')
    return typeof id === 'string' && sseFrameProblems('order.status', data).length === 0
      ? { id, ...(data as OrderStatusEvent) }
      : undefined
  } catch {
    return undefined
  }
}

/** An instance's stream of one client's changes. */
export interface StatusChangeListener {
  deliver (event: OrderStatusChange): void
  /** Redis failed or stopped answering: the changes no longer arrive, and the stream must end. */
  drop (): void
}

/** How often, while streams are open, the pub/sub connection is asked whether Redis answers. */
export const LIVENESS_INTERVAL_MS = 5000

export interface OrderStatusChangesOptions {
  redis: Redis
  pubsub: PubSub
  keyPrefix: string
  /** Changes kept per client for `Last-Event-ID` to resume from. */
  backlogLength: number
  /** A client with no change for this long has its backlog removed. */
  backlogRetentionSeconds: number
  /** How long Redis has to answer the liveness PING (REDIS_COMMAND_TIMEOUT_MS). */
  commandTimeoutMs: number
  log: FastifyBaseLogger
}

/**
 * Order status changes for every instance's SSE streams. Each client's changes go to a short
 * Redis stream (the backlog that `Last-Event-ID` resumes from) and are announced on one pub/sub
 * channel, which each instance fans out to its own connections.
 */
export class OrderStatusChanges {
  readonly #listeners = new Map<number, Set<StatusChangeListener>>()
  readonly #all = new Set<StatusChangeListener>()
  readonly #channel: string
  #liveness: NodeJS.Timeout | undefined
  /** A PING not answered yet: while there is one, Redis has not answered since it was sent. */
  #unanswered: Promise<unknown> | undefined

  readonly #redis: Redis
  readonly #pubsub: PubSub
  readonly #prefix: string
  readonly #options: OrderStatusChangesOptions

  constructor (options: OrderStatusChangesOptions) {
    const { redis, pubsub, keyPrefix } = options
    this.#redis = redis
    this.#pubsub = pubsub
    this.#prefix = keyPrefix
    this.#options = options
    this.#channel = orderStatusChannel(keyPrefix, databaseOf(redis))
    // Specification §6: when the cache fails, the streams drop, and clients reconnect.
    pubsub.onLost(() => this.#dropAll('Redis connection lost'))
  }

  async start (): Promise<void> {
    await this.#pubsub.subscribe(this.#channel, (message) => this.#deliver(message))
    this.#liveness = setInterval(() => { this.#checkLiveness().catch(() => {}) }, LIVENESS_INTERVAL_MS).unref()
  }

  stop (): void {
    clearInterval(this.#liveness)
  }

  /**
   * Announces a status change; a Redis failure is logged, not thrown: the status is in PostgreSQL.
   * An event that breaks its schema is refused (SSE_EVENT_REFUSED) before Redis sees it.
   */
  async publish (order: Order): Promise<void> {
    if (order.billingClientId === null) return
    const event = orderStatusFrame(order)
    try {
      const key = this.#backlogKey(order.billingClientId)
      const results = await this.#redis.multi()
        .xadd(key, 'MAXLEN', '~', String(this.#options.backlogLength), '*', 'event', JSON.stringify(event))
        .expire(key, this.#options.backlogRetentionSeconds)
        .exec()
      // One [error, result] pair a command; null when the transaction was discarded.
      const failed = results?.find(([error]) => error !== null)
      if (results == null || failed !== undefined) {
        throw failed?.[0] ?? new Error('the backlog transaction was discarded')
      }
      const id = results[0]![1] as string
      await this.#redis.publish(
        this.#channel,
        JSON.stringify({ clientId: order.billingClientId, event: { id, ...event } })
      )
    } catch (error) {
      this.#options.log.warn(
        { err: error, orderId: order.id, status: order.status },
        'order status change not announced: Redis unavailable'
      )
    }
  }

  /**
   * The client's changes after `lastEventId`, oldest first; an entry that is no `order.status` event is
   * skipped, and logged.
   */
  async backlog (clientId: number, lastEventId: string): Promise<OrderStatusChange[]> {
    const entries = await this.#redis.xrange(this.#backlogKey(clientId), `(${lastEventId}`, '+')
    return entries.flatMap(([id, fields]) => {
      const event = readFrame(id, fields[1])
      if (event === undefined) {
        this.#options.log.warn(
          { clientId, entryId: id },
          'order status backlog entry skipped: it is no order.status event'
        )
      }
      return event ?? []
    })
  }

  /** Listens to one client's changes until `unlisten`. */
  listen (clientId: number, listener: StatusChangeListener): void {
    const listeners = this.#listeners.get(clientId) ?? new Set()
    listeners.add(listener)
    this.#listeners.set(clientId, listeners)
    this.#all.add(listener)
  }

  unlisten (clientId: number, listener: StatusChangeListener): void {
    const listeners = this.#listeners.get(clientId)
    listeners?.delete(listener)
    if (listeners?.size === 0) this.#listeners.delete(clientId)
    this.#all.delete(listener)
  }

  #deliver (message: string): void {
    let parsed: { clientId?: unknown, event?: { id?: unknown } }
    try {
      parsed = JSON.parse(message)
    } catch {
      return
    }
    const { id, ...data } = parsed.event ?? {}
    const event = typeof parsed.clientId === 'number' ? readFrame(id, JSON.stringify(data)) : undefined
    if (event === undefined) return
    for (const listener of this.#listeners.get(parsed.clientId as number) ?? []) listener.deliver(event)
  }

  /** Drops the streams when Redis does not answer a PING in time, or has not answered the last one yet. */
  async #checkLiveness (): Promise<void> {
    if (this.#all.size === 0) return
    if (this.#unanswered === undefined) {
      const ping = this.#pubsub.ping().finally(() => { this.#unanswered = undefined })
      ping.catch(() => {})
      this.#unanswered = ping
    }
    const answered = await abortable(this.#unanswered, AbortSignal.timeout(this.#options.commandTimeoutMs))
      .then(() => true, () => false)
    if (!answered) this.#dropAll('Redis not answering')
  }

  #dropAll (reason: string): void {
    if (this.#all.size === 0) return
    this.#options.log.info(`SSE streams dropped: ${reason} (${this.#all.size} streams)`)
    for (const listener of [...this.#all]) listener.drop()
  }

  #backlogKey (clientId: number): string {
    return orderStatusBacklogKey(this.#prefix, clientId)
  }
}

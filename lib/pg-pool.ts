import type pg from 'pg'

type Observe = (durationMs: number, failed: boolean) => void
type AnyQuery = (...args: unknown[]) => unknown

function instrumentClient (client: pg.PoolClient, observe: Observe): void {
  const query = client.query as unknown as AnyQuery
  // pg's Pool queries with a callback, callers with a promise, cursors with a submittable:
  // each is timed to its end.
  const timed = function (this: pg.PoolClient, ...args: unknown[]): unknown {
    const started = performance.now()
    const done = (error?: unknown) => observe(performance.now() - started, error !== undefined && error !== null)
    const last = args.length - 1
    const callback = args[last]
    if (typeof callback === 'function') {
      args[last] = (error: unknown, result: unknown) => {
        done(error)
        return (callback as AnyQuery)(error, result)
      }
      return query.apply(this, args)
    }
    const result = query.apply(this, args) as { then?: unknown, once?: unknown } | undefined
    if (typeof result?.then === 'function') {
      (result as Promise<unknown>).then(() => done(), done)
    } else if (typeof result?.once === 'function') {
      const submittable = result as unknown as { once (event: string, listener: (error?: unknown) => void): void }
      submittable.once('end', () => done())
      submittable.once('error', done)
    }
    return result
  }
  client.query = timed as unknown as typeof client.query
}

/** Times every query of the pool's connections, whichever way it is made. */
export function instrumentPool (pool: pg.Pool, observe: Observe): void {
  pool.on('connect', (client) => instrumentClient(client, observe))
}

export interface PoolUsage {
  inUse: number
  idle: number
  /** Callers waiting for a connection. */
  waiting: number
  max: number
}

export function poolUsage (pool: pg.Pool): PoolUsage {
  const max = (pool as unknown as { options: { max?: number } }).options.max ?? 10
  return { inUse: pool.totalCount - pool.idleCount, idle: pool.idleCount, waiting: pool.waitingCount, max }
}

/** The part of a pg client under its public API that carries its socket. */
interface ClientSocket { connection?: { stream?: { destroy: () => void } } }

/** The connections a pool has lent out, so that they can be dropped when their server stops answering. */
export class LentConnections {
  readonly #lent = new Set<pg.PoolClient>()

  constructor (pool: pg.Pool) {
    pool.on('acquire', (client) => this.#lent.add(client))
    pool.on('release', (_error, client) => this.#lent.delete(client))
    pool.on('remove', (client) => this.#lent.delete(client))
  }

  /**
   * Closes the socket of every lent connection: their queries fail at once, as when the server goes
   * away, instead of each waiting out its query timeout; the pool drops them when they come back.
   * Answers how many there were.
   */
  drop (): number {
    const count = this.#lent.size
    for (const client of this.#lent) (client as unknown as ClientSocket).connection?.stream?.destroy()
    this.#lent.clear()
    return count
  }
}

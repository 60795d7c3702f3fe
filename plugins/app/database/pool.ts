import type pg from 'pg'
import { SpanKind, failSpan, recording, startChildSpan } from '../../../lib/tracing.js'

type Observe = (durationMs: number, failed: boolean) => void
type AnyQuery = (...args: unknown[]) => unknown

/**
 * A statement with its literal values elided, its placeholders (`$1`) kept: parameters are never in the text,
 * and literals may be personal too.
 */
export function elidedStatement (text: string): string {
  return text.replace(/'(?:[^']|'')*'/g, '?').replace(/(?<!\$)\b\d+(\.\d+)?\b/g, '?').replace(/\s+/g, ' ').trim()
}

function statementOf (query: unknown): string | undefined {
  if (typeof query === 'string') return query
  const text = (query as { text?: unknown } | undefined)?.text
  return typeof text === 'string' ? text : undefined
}

/** A span for a query made within a traced piece of work; undefined otherwise. */
function querySpan (query: unknown) {
  if (!recording()) return undefined
  const text = statementOf(query)
  const operation = text?.trim().split(/\s+/, 1)[0]?.toUpperCase() ?? 'QUERY'
  return startChildSpan(`pg ${operation}`, {
    kind: SpanKind.CLIENT,
    attributes: {
      'db.system.name': 'postgresql',
      'db.operation.name': operation,
      ...(text !== undefined && { 'db.query.text': elidedStatement(text) })
    }
  })
}

function instrumentClient (client: pg.PoolClient, observe: Observe): void {
  const query = client.query as unknown as AnyQuery
  // pg's Pool queries with a callback, callers with a promise, cursors with a submittable:
  // each is timed to its end.
  const timed = function (this: pg.PoolClient, ...args: unknown[]): unknown {
    const started = performance.now()
    const span = querySpan(args[0])
    const done = (error?: unknown) => {
      const failed = error !== undefined && error !== null
      observe(performance.now() - started, failed)
      if (span === undefined) return
      if (failed) failSpan(span, error, (error as { code?: unknown }).code === undefined ? undefined : `pg ${String((error as { code?: unknown }).code)}`)
      span.end()
    }
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

import { createHash, randomUUID } from 'node:crypto'
import type { Pool, PoolClient } from 'pg'
import type { Lease, NewPlacement, Placement, PlacementStore } from './placement-store.js'
import type { Order } from './store.js'

/** What a request with an Idempotency-Key gets to do, or is answered. */
export type Reservation =
  /** The first request with this key (or the first after nothing of its placement stood): place it, holding `lease`. */
  | { kind: 'new', placement: Placement, lease: Lease }
  /** The key's placement stopped before it was done, and nobody holds it: complete it, holding `lease`. */
  | { kind: 'resume', placement: Placement, lease: Lease }
  /** The answer given to the first request, again. */
  | { kind: 'replay', statusCode: number, body: unknown }
  /** The key's order went through, though its first request was not told so. */
  | { kind: 'placed', order: Order }
  /** The key's placement is under way, or being undone: come again after `retryAfterSeconds`. */
  | { kind: 'in_progress', retryAfterSeconds: number }
  /** The key's placement did not go on and was cancelled in billing: the key places nothing more. */
  | { kind: 'cancelled' }
  /** The key was used with another request body. */
  | { kind: 'mismatch' }

export interface IdempotencyKeysOptions {
  pool: Pool
  placements: PlacementStore
  /** How long a key is kept after its first use. */
  retentionSeconds: number
}

/** What makes two order requests the same: the product and the billing cycle. */
export function requestFingerprint ({
  productId,
  billingCycle
}: Pick<NewPlacement, 'productId' | 'billingCycle'>): string {
  return createHash('sha256').update(`${productId}\n${billingCycle}`).digest('hex')
}

/**
 * The Idempotency-Key of POST /api/orders, kept in PostgreSQL (shared by every instance, kept when
 * Redis is lost): each client's key stands for one placement, and at most one billing order, until
 * it expires. A retry completes the key's placement when it stopped after billing took the order;
 * a key whose placement left no billing order (refused, or never reached) may place again.
 */
export class IdempotencyKeys {
  constructor (private readonly options: IdempotencyKeysOptions) {}

  async reserve (
    clientId: number,
    key: string,
    fingerprint: string,
    request: NewPlacement,
    claimMs: number,
    leaseMs: number
  ): Promise<Reservation> {
    const { pool, placements, retentionSeconds } = this.options
    const lease = { holder: randomUUID(), leaseMs }
    const client = await pool.connect()
    let broken: Error | undefined
    try {
      await client.query('BEGIN')
      try {
        await client.query(
          'DELETE FROM order_idempotency_keys WHERE billing_client_id = $1 AND key = $2 AND expires_at <= now()',
          [clientId, key]
        )
        // A concurrent first use of the key waits here until that one commits, then sees its row.
        const inserted = await client.query(
          `INSERT INTO order_idempotency_keys (billing_client_id, key, request_hash, expires_at)
           VALUES ($1, $2, $3, now() + $4 * interval '1 second') ON CONFLICT DO NOTHING`,
          [clientId, key, fingerprint, retentionSeconds])
        let reservation: Reservation | undefined
        if (inserted.rowCount === 0) {
          const { rows } = await client.query<{
            request_hash: string, order_id: string | null, response_status: number | null, response_body: unknown
          }>(
            'SELECT request_hash, order_id, response_status, response_body FROM order_idempotency_keys ' +
            'WHERE billing_client_id = $1 AND key = $2 FOR UPDATE',
            [clientId, key]
          )
          const stored = rows[0]!
          const placement = stored.order_id === null ? null : await placements.find(stored.order_id, client)
          if (stored.request_hash !== fingerprint) reservation = { kind: 'mismatch' }
          else if (stored.response_status !== null) {
            reservation = { kind: 'replay', statusCode: stored.response_status, body: stored.response_body }
          } else if (placement !== null) reservation = await this.#existing(placement, lease, client)
        }
        if (reservation === undefined) {
          const placement = await placements.begin(request, claimMs, client, lease)
          await client.query(
            'UPDATE order_idempotency_keys SET order_id = $3 WHERE billing_client_id = $1 AND key = $2',
            [clientId, key, placement.order.id]
          )
          reservation = { kind: 'new', placement, lease }
        }
        await client.query('COMMIT')
        return reservation
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {})
        throw error
      }
    } catch (error) {
      broken = error as Error
      throw error
    } finally {
      // A connection that failed mid-transaction is dropped rather than lent again.
      client.release(broken)
    }
  }

  /** What a retry gets of the key's placement; undefined when nothing of it stands (a new one may begin). */
  async #existing (placement: Placement, lease: Lease, client: PoolClient): Promise<Reservation | undefined> {
    switch (placement.step) {
      case 'placed': return { kind: 'placed', order: placement.order }
      case 'compensated': return placement.order.billingOrderId === null ? undefined : { kind: 'cancelled' }
      case 'billing':
      case 'crm': {
        const taken = await this.options.placements.takeOver(placement.order.id, lease, client)
        if (taken !== null) return { kind: 'resume', placement: taken, lease }
      }
    }
    return { kind: 'in_progress', retryAfterSeconds: Math.max(1, Math.ceil(placement.leaseRemainingMs / 1000)) }
  }

  /** The answer the key gives from now on. */
  async keepAnswer (clientId: number, key: string, statusCode: number, body: unknown): Promise<void> {
    await this.options.pool.query(
      'UPDATE order_idempotency_keys SET response_status = $3, response_body = $4 WHERE billing_client_id = $1 AND key = $2',
      [clientId, key, statusCode, JSON.stringify(body)])
  }

  /** Forgets the keys past their time; how many went. */
  async removeExpired (): Promise<number> {
    const { rowCount } = await this.options.pool.query('DELETE FROM order_idempotency_keys WHERE expires_at <= now()')
    return rowCount ?? 0
  }
}

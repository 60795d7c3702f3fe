import type { Pool, PoolClient } from 'pg'
import { currentTraceparent } from '../../../lib/tracing.js'
import { COLUMNS, toOrder, type Order, type OrderRow } from './store.js'

/**
 * Where a portal order's placement stands: `billing` (the order row exists; AddOrder may have been
 * sent), `crm` (its billing order is recorded, its CRM order is not), `placed` (linked to its CRM
 * order), `compensating` (it will not go on, `Failed` or cancelled by the CRM: its billing order is
 * to be cancelled), `compensated`.
 */
export type PlacementStep = 'billing' | 'crm' | 'placed' | 'compensating' | 'compensated'

export interface Placement {
  order: Order
  step: PlacementStep
  /** The highest billing order id known when AddOrder was sent: a lost answer's order is newer. */
  billingFloor: number | null
  billingInvoiceId: number | null
  /** How long its holder's lease has still to run (0: none holds it, a retry with its key may take it over). */
  leaseRemainingMs: number
  /** How long a create sent for it and not answered (AddOrder, then the CRM create) may still land (0: none may). */
  createLandingMs: number
}

/** A keyed placement's times: its CRM create's landing bound, and how long it waits for a retry. */
export interface KeyedTimes {
  createLandingMs: number
  resumableMs: number
}

export interface NewPlacement {
  billingClientId: number
  productId: string
  billingCycle: string
}

type PlacementRow = OrderRow & {
  placement: PlacementStep,
  billing_floor: number | null,
  billing_invoice_id: number | null,
  lease_remaining_ms: number,
  create_landing_ms: number
}

const remainingMs = (column: string) => `ceil(extract(epoch FROM greatest(${column}, now()) - now()) * 1000)::int`
const PLACEMENT_COLUMNS = `${COLUMNS}, placement, billing_floor, billing_invoice_id,
  ${remainingMs('placement_lease_until')} AS lease_remaining_ms, ${remainingMs('create_landing_until')} AS create_landing_ms`
const CLAIM = 'now() + $2 * interval \'1 millisecond\''
const AFTER = (parameter: string) => `now() + ${parameter} * interval '1 millisecond'`

function toPlacement (row: PlacementRow): Placement {
  return {
    order: toOrder(row),
    step: row.placement,
    billingFloor: row.billing_floor,
    billingInvoiceId: row.billing_invoice_id,
    leaseRemainingMs: row.lease_remaining_ms,
    createLandingMs: row.create_landing_ms
  }
}

/** Who holds a placement (one request, or one retry), and for how long at a time. */
export interface Lease {
  holder: string
  leaseMs: number
}

type Queryable = Pick<Pool | PoolClient, 'query'>

/**
 * The placement steps of portal orders, in the orders table. Every step moves on only from the step
 * it expects, so the request that places an order and a recovery run never both take one step.
 */
export class PlacementStore {
  constructor (private readonly pool: Pool) {}

  /**
   * The order row, before anything is asked of billing; claimed by the caller for `claimMs`, and
   * leased to `lease.holder` when a retry with its key could take it over (its AddOrder, sent next,
   * may then land for `claimMs`).
   */
  async begin (order: NewPlacement, claimMs: number, client: Queryable = this.pool, lease?: Lease): Promise<Placement> {
    const { rows } = await client.query<PlacementRow>(
      `INSERT INTO orders (billing_client_id, product_id, billing_cycle, placement, placement_claimed_until, billing_floor,
         placement_holder, placement_lease_until, create_landing_until, placement_trace)
       VALUES ($1, $3, $4, 'billing', ${CLAIM}, (SELECT max(billing_order_id) FROM orders), $5, ${AFTER('$6::int')}, ${AFTER('$7::int')}, $8)
       RETURNING ${PLACEMENT_COLUMNS}`,
      // The placement's span, kept with the order: its later work links to it.
      [
        order.billingClientId, claimMs, order.productId, order.billingCycle, lease?.holder ?? null,
        lease?.leaseMs ?? null, lease === undefined ? null : claimMs, currentTraceparent() ?? null
      ])
    return toPlacement(rows[0]!)
  }

  /** An unfinished keyed placement whose lease has run out, leased to `lease.holder`; else null. */
  async takeOver (id: string, lease: Lease, client: Queryable = this.pool): Promise<Placement | null> {
    const { rows } = await client.query<PlacementRow>(
      `UPDATE orders SET placement_holder = $2, placement_lease_until = ${AFTER('$3')}, updated_at = now()
       WHERE id = $1 AND placement IN ('billing', 'crm') AND coalesce(placement_lease_until, '-infinity') < now()
       RETURNING ${PLACEMENT_COLUMNS}`,
      [id, lease.holder, lease.leaseMs])
    return rows[0] === undefined ? null : toPlacement(rows[0])
  }

  /** Renews the holder's lease; false when it no longer holds it. */
  async renewLease (id: string, lease: Lease): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      `UPDATE orders SET placement_lease_until = ${AFTER('$3')} WHERE id = $1 AND placement_holder = $2`, [id, lease.holder, lease.leaseMs])
    return rowCount === 1
  }

  /** The holder is done with it: a retry may take it at once; kept for one `resumableMs` more when it waits for one. */
  async releaseLease (id: string, lease: Lease, resumableMs: number): Promise<void> {
    await this.pool.query(
      `UPDATE orders SET placement_holder = NULL, placement_lease_until = NULL,
         placement_resumable_until = CASE WHEN placement = 'crm' THEN ${AFTER('$3')} ELSE placement_resumable_until END
       WHERE id = $1 AND placement_holder = $2`, [id, lease.holder, resumableMs])
  }

  /** A create (AddOrder, or the CRM create) is about to be sent and may land for `ms`; or it was answered (`null`). */
  async createSent (id: string, ms: number | null): Promise<void> {
    await this.pool.query(`UPDATE orders SET create_landing_until = ${AFTER('$2::int')} WHERE id = $1`, [id, ms])
  }

  async find (id: string, client: Queryable = this.pool): Promise<Placement | null> {
    const { rows } = await client.query<PlacementRow>(`SELECT ${PLACEMENT_COLUMNS} FROM orders WHERE id = $1`, [id])
    return rows[0] === undefined ? null : toPlacement(rows[0])
  }

  /**
   * Billing placed the order: null when the placement had left the billing step (a recovery took it).
   * A keyed one waits for a retry from now on, and its CRM create, sent next, may land for `createLandingMs`.
   */
  async recordBilling (
    id: string,
    billingOrderId: number,
    billingInvoiceId: number | null,
    keyed?: KeyedTimes
  ): Promise<Placement | null> {
    return this.#step(id, ['billing'], `placement = 'crm', billing_order_id = $3, billing_invoice_id = $4,
      create_landing_until = ${AFTER('$5::int')}, placement_resumable_until = ${AFTER('$6::int')}`,
    [billingOrderId, billingInvoiceId, keyed?.createLandingMs ?? null, keyed?.resumableMs ?? null])
  }

  /** The CRM order exists: the placement is done. Null when it had left the CRM step. */
  async link (id: string, crmOrderId: string): Promise<Placement | null> {
    return this.#step(id, ['crm'], 'placement = \'placed\', crm_order_id = $3, placement_claimed_until = NULL', [
      crmOrderId
    ])
  }

  /** The order will not go on: `Failed` with the reason, its billing order to be cancelled. */
  async abandon (id: string, failureReason: string): Promise<Placement | null> {
    const assignments = 'placement = \'compensating\', status = \'Failed\', failure_reason = $3'
    return this.#step(id, ['billing', 'crm'], assignments, [
      failureReason
    ])
  }

  /**
   * The CRM cancelled or rejected a placed order still in `Pending Review` that no event handed to
   * provisioning: `Cancelled` with the reason, its billing order to be cancelled, claimed by the
   * caller for `claimMs` (one without a billing order is done with). Null when it has moved on.
   */
  async cancel (id: string, failureReason: string, claimMs: number): Promise<Placement | null> {
    const { rows } = await this.pool.query<PlacementRow>(
      `UPDATE orders SET status = 'Cancelled', failure_reason = $3, updated_at = now(),
         placement = CASE WHEN billing_order_id IS NULL THEN 'compensated' ELSE 'compensating' END,
         placement_claimed_until = CASE WHEN billing_order_id IS NULL THEN NULL ELSE ${CLAIM} END
       WHERE id = $1 AND status = 'Pending Review' AND provisioning_requested_at IS NULL AND (placement IS NULL OR placement = 'placed')
       RETURNING ${PLACEMENT_COLUMNS}`,
      [id, claimMs, failureReason])
    return rows[0] === undefined ? null : toPlacement(rows[0])
  }

  /** Its billing order is cancelled (or none was placed): nothing is left to do. */
  async compensated (id: string): Promise<Placement | null> {
    return this.#step(
      id,
      ['compensating'],
      'placement = \'compensated\', placement_claimed_until = NULL, billing_cancelled_at = CASE WHEN billing_order_id IS NULL THEN NULL ELSE now() END',
      []
    )
  }

  /** Billing refused the order or surely never saw it: the row goes, as if never placed. */
  async discard (id: string): Promise<void> {
    await this.pool.query('DELETE FROM orders WHERE id = $1 AND placement = \'billing\'', [id])
  }

  /**
   * Records a billing order found for a placement whose AddOrder answer was lost; false when another
   * order holds it already (or this one has its own).
   */
  async adoptBillingOrder (id: string, billingOrderId: number): Promise<boolean> {
    try {
      const { rowCount } = await this.pool.query(
        'UPDATE orders SET billing_order_id = $2, updated_at = now() WHERE id = $1 AND billing_order_id IS NULL',
        [id, billingOrderId]
      )
      return rowCount === 1
    } catch (error) {
      if ((error as { code?: string }).code === '23505') return false
      throw error
    }
  }

  /** Which of these billing orders a stored order holds. */
  async heldBillingOrderIds (billingOrderIds: number[]): Promise<Set<number>> {
    const { rows } = await this.pool.query<{ billing_order_id: number }>(
      'SELECT billing_order_id FROM orders WHERE billing_order_id = ANY($1)',
      [billingOrderIds]
    )
    return new Set(rows.map((row) => row.billing_order_id))
  }

  /**
   * Takes up to `limit` unfinished placements whose claim has run out (the request or run that held
   * it is gone or late), or that waited for a retry with their key in vain; that no request or retry
   * holds, and whose CRM create can no longer land; oldest claim first, and claims them for `claimMs`.
   * Rows another run is claiming at the same moment are skipped, not waited for.
   */
  async claimUnfinished (limit: number, claimMs: number): Promise<Placement[]> {
    // Leased for the claim too, so that a retry with its key does not take it over meanwhile.
    const { rows } = await this.pool.query<PlacementRow>(
      `UPDATE orders SET placement_claimed_until = ${CLAIM}, placement_lease_until = ${CLAIM}, placement_holder = NULL
       WHERE id IN (
         SELECT id FROM orders
         WHERE placement IN ('billing', 'crm', 'compensating')
           AND (placement_resumable_until IS NOT NULL OR coalesce(placement_claimed_until, '-infinity') < now())
           AND coalesce(placement_lease_until, '-infinity') < now() AND coalesce(placement_resumable_until, '-infinity') < now()
           AND coalesce(create_landing_until, '-infinity') < now()
         ORDER BY placement_claimed_until NULLS FIRST LIMIT $1 FOR UPDATE SKIP LOCKED
       ) RETURNING ${PLACEMENT_COLUMNS}`,
      [limit, claimMs])
    return rows.map(toPlacement)
  }

  /** Unfinished placements, and how long the oldest has waited (seconds; null when none). */
  async unfinished (): Promise<{ count: number, oldestAgeSeconds: number | null }> {
    const { rows } = await this.pool.query<{ count: number, oldest: number | null }>(
      `SELECT count(*)::int AS count, extract(epoch FROM now() - min(created_at))::float8 AS oldest
       FROM orders WHERE placement IN ('billing', 'crm', 'compensating')`)
    return { count: rows[0]?.count ?? 0, oldestAgeSeconds: rows[0]?.oldest ?? null }
  }

  async #step (id: string, from: PlacementStep[], assignments: string, values: unknown[]): Promise<Placement | null> {
    const { rows } = await this.pool.query<PlacementRow>(
      `UPDATE orders SET ${assignments}, updated_at = now() WHERE id = $1 AND placement = ANY($2) RETURNING ${PLACEMENT_COLUMNS}`,
      [id, from, ...values])
    return rows[0] === undefined ? null : toPlacement(rows[0])
  }
}

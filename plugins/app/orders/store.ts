import type { Pool } from 'pg'
import { caseSafeId } from '../../../integrations/crm/salesforce-id.js'
import { linkTo, tracingEnabled, type Link } from '../../../lib/tracing.js'
import type { ORDER_STATUSES } from '../../../schemas/orders.js'

export type OrderStatus = typeof ORDER_STATUSES[number]

export interface Order {
  id: string
  billingClientId: number | null
  productId: string
  billingCycle: string | null
  billingOrderId: number | null
  crmOrderId: string | null
  status: OrderStatus
  failureReason: string | null
  telecomActivationId: string | null
  msisdn: string | null
  billingAcceptedAt: string | null
  crmActivatedAt: string | null
  provisioningAttempts: number
  createdAt: string
  updatedAt: string
}

export const COLUMNS = `id, billing_client_id, product_id, billing_cycle, billing_order_id, crm_order_id, status,
  failure_reason, telecom_activation_id, msisdn, billing_accepted_at, crm_activated_at, provisioning_attempts,
  created_at, updated_at`

export interface OrderRow {
  id: string
  billing_client_id: number | null
  product_id: string
  billing_cycle: string | null
  billing_order_id: number | null
  crm_order_id: string | null
  status: OrderStatus
  failure_reason: string | null
  telecom_activation_id: string | null
  msisdn: string | null
  billing_accepted_at: Date | null
  crm_activated_at: Date | null
  provisioning_attempts: number
  created_at: Date
  updated_at: Date
}

export function toOrder (row: OrderRow): Order {
  return {
    id: row.id,
    billingClientId: row.billing_client_id,
    productId: row.product_id,
    billingCycle: row.billing_cycle,
    billingOrderId: row.billing_order_id,
    crmOrderId: row.crm_order_id,
    status: row.status,
    failureReason: row.failure_reason,
    telecomActivationId: row.telecom_activation_id,
    msisdn: row.msisdn,
    billingAcceptedAt: row.billing_accepted_at?.toISOString() ?? null,
    crmActivatedAt: row.crm_activated_at?.toISOString() ?? null,
    provisioningAttempts: row.provisioning_attempts,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString()
  }
}

export interface NewOrder {
  billingClientId: number | null
  productId: string
  billingCycle: string | null
  billingOrderId: number | null
  crmOrderId: string | null
}

/** The orders table, in the service's words. */
export class OrderStore {
  constructor (private readonly pool: Pool) {}

  async create (order: NewOrder): Promise<Order> {
    const { rows } = await this.pool.query<OrderRow>(
      `INSERT INTO orders (billing_client_id, product_id, billing_cycle, billing_order_id, crm_order_id)
       VALUES ($1, $2, $3, $4, $5) RETURNING ${COLUMNS}`,
      [order.billingClientId, order.productId, order.billingCycle, order.billingOrderId, order.crmOrderId])
    return toOrder(rows[0]!)
  }

  /**
   * Stores an order the CRM told of, unless one with its CRM id exists; either way returns the
   * stored one. A portal order still in Pending Review that has the CRM order's billing order but
   * no CRM id (its placement stopped before the id was written) is that order: it is linked, not
   * stored twice. `provisioningRequested`: an event handed it to the job queue, recorded in the
   * same statement (a first hand-off's time stays). Another order holding the billing order is a
   * unique violation on billing_order_id.
   */
  async ensure (order: NewOrder & { crmOrderId: string }, { provisioningRequested = false } = {}): Promise<Order> {
    // The insert is skipped once linked. On a conflict (another hand-off, or the portal, stored it
    // first) the update changes nothing but the mark, and makes the statement return the stored row.
    const { rows } = await this.pool.query<OrderRow>(
      `WITH linked AS (
         UPDATE orders SET crm_order_id = $5, updated_at = now(),
           provisioning_requested_at = COALESCE(provisioning_requested_at, CASE WHEN $6 THEN now() END)
         WHERE billing_order_id = $4 AND crm_order_id IS NULL AND status = 'Pending Review'
           AND ($1::int IS NULL OR billing_client_id IS NULL OR billing_client_id = $1)
         RETURNING ${COLUMNS}
       ), stored AS (
         INSERT INTO orders (billing_client_id, product_id, billing_cycle, billing_order_id, crm_order_id, provisioning_requested_at)
         SELECT $1, $2, $3, $4, $5, CASE WHEN $6 THEN now() END WHERE NOT EXISTS (SELECT 1 FROM linked)
         ON CONFLICT (crm_order_id) DO UPDATE SET provisioning_requested_at = COALESCE(orders.provisioning_requested_at, EXCLUDED.provisioning_requested_at)
         RETURNING ${COLUMNS}
       )
       SELECT * FROM linked UNION ALL SELECT * FROM stored`,
      [
        order.billingClientId, order.productId, order.billingCycle, order.billingOrderId, order.crmOrderId,
        provisioningRequested
      ])
    return toOrder(rows[0]!)
  }

  async findByCrmId (crmOrderId: string): Promise<Order | null> {
    const { rows } = await this.pool.query<OrderRow>(`SELECT ${COLUMNS} FROM orders WHERE crm_order_id = $1`, [crmOrderId])
    return rows[0] === undefined ? null : toOrder(rows[0])
  }

  async findForClient (billingClientId: number, id: string): Promise<Order | null> {
    const { rows } = await this.pool.query<OrderRow>(`SELECT ${COLUMNS} FROM orders WHERE id = $1 AND billing_client_id = $2`, [id, billingClientId])
    return rows[0] === undefined ? null : toOrder(rows[0])
  }

  /**
   * One page of a client's orders, newest first, and how many there are: one statement, so one
   * pooled connection and one snapshot (a page past the end still gives the total).
   */
  async listForClient (
    billingClientId: number,
    limit: number,
    offset: number
  ): Promise<{ orders: Order[], total: number }> {
    // A page past the end is one row of the total alone, its order columns null.
    const { rows } = await this.pool.query<Omit<OrderRow, 'id'> & { id: string | null, total: string }>(
      `SELECT counted.total, page.* FROM (SELECT count(*) AS total FROM orders WHERE billing_client_id = $1) AS counted
       LEFT JOIN LATERAL (
         SELECT ${COLUMNS} FROM orders WHERE billing_client_id = $1 ORDER BY created_at DESC, id LIMIT $2 OFFSET $3
       ) AS page ON true`,
      [billingClientId, limit, offset]
    )
    const orders = rows.filter((row): row is OrderRow & { total: string } => row.id !== null).map(toOrder)
    return { orders, total: Number(rows[0]?.total ?? 0) }
  }

  /**
   * The orders waiting in `Pending Review` for the CRM: those awaiting approval, and those it
   * approved whose platform event did not come. Orders an event handed to the job queue wait for
   * their job, not the CRM, and are neither.
   */
  /**
   * The stored order with this CRM id, marked as handed by an event to the job queue (until it
   * leaves Pending Review, a job for it is queued; a first hand-off's time stays); null when none
   * is stored. Found and marked in one statement.
   */
  /** The traceparent of the span the order was placed in (any of its CRM id's forms); null when none was kept. */
  /**
   * A link to the span the order was placed in, for the work that hands it to provisioning (an
   * event's hand-off, the reconciliation): its sampler follows the placement's decision. Undefined
   * while tracing is off (no statement made then) or when none was kept.
   */
  async placementLink (crmOrderId: string): Promise<Link | undefined> {
    if (!tracingEnabled()) return undefined
    return linkTo(await this.placementTrace([crmOrderId, caseSafeId(crmOrderId)]))
  }

  async placementTrace (crmOrderIds: string[]): Promise<string | null> {
    const { rows } = await this.pool.query<{ placement_trace: string | null }>(
      'SELECT placement_trace FROM orders WHERE crm_order_id = ANY($1) AND placement_trace IS NOT NULL LIMIT 1',
      [crmOrderIds]
    )
    return rows[0]?.placement_trace ?? null
  }

  async markProvisioningRequested (crmOrderId: string): Promise<Order | null> {
    const { rows } = await this.pool.query<OrderRow>(
      `UPDATE orders SET provisioning_requested_at = COALESCE(provisioning_requested_at, now()) WHERE crm_order_id = $1 RETURNING ${COLUMNS}`,
      [crmOrderId])
    return rows[0] === undefined ? null : toOrder(rows[0])
  }

  /**
   * The CRM ids of the orders whose provisioning job is queued or running but not finished: those
   * handed off and still in Pending Review, and those in Provisioning.
   */
  async awaitingProvisioning (): Promise<string[]> {
    const { rows } = await this.pool.query<{ crm_order_id: string }>(
      `SELECT crm_order_id FROM orders WHERE crm_order_id IS NOT NULL
       AND (status = 'Provisioning' OR (status = 'Pending Review' AND provisioning_requested_at IS NOT NULL))`)
    return rows.map((row) => row.crm_order_id)
  }

  async setCrmOrderId (id: string, crmOrderId: string): Promise<Order> {
    return this.#update(id, 'crm_order_id = $2', [crmOrderId])
  }

  /** Moves the order to `status`; null when it already was there (so nothing is announced twice). */
  async changeStatus (id: string, status: OrderStatus, failureReason: string | null = null): Promise<Order | null> {
    const { rows } = await this.pool.query<OrderRow>(
      `UPDATE orders SET status = $2, failure_reason = $3, updated_at = now()
       WHERE id = $1 AND (status <> $2 OR failure_reason IS DISTINCT FROM $3) RETURNING ${COLUMNS}`,
      [id, status, failureReason])
    return rows[0] === undefined ? null : toOrder(rows[0])
  }

  /**
   * Counts a provisioning attempt and moves the order to `Provisioning`, unless it is `Active`: one
   * statement. Null when nothing was done: no such order, or an `Active` one. `statusChanged` says
   * whether the status (or a failure reason) changed, so that a retry announces nothing.
   */
  async startProvisioning (crmOrderId: string): Promise<{ order: Order, statusChanged: boolean } | null> {
    // The subquery locks the row and reads it as it was, which RETURNING alone cannot.
    const { rows } = await this.pool.query<OrderRow & { status_changed: boolean }>(
      `UPDATE orders SET status = 'Provisioning', failure_reason = NULL, provisioning_attempts = provisioning_attempts + 1, updated_at = now()
       FROM (SELECT id AS previous_id, status AS previous_status, failure_reason AS previous_failure_reason FROM orders WHERE crm_order_id = $1 FOR UPDATE) AS previous
       WHERE id = previous_id AND previous_status <> 'Active'
       RETURNING ${COLUMNS}, previous_status <> 'Provisioning' OR previous_failure_reason IS NOT NULL AS status_changed`,
      [crmOrderId])
    return rows[0] === undefined ? null : { order: toOrder(rows[0]), statusChanged: rows[0].status_changed }
  }

  async recordActivation (id: string, activationId: string, msisdn: string | null): Promise<Order> {
    return this.#update(id, 'telecom_activation_id = $2, msisdn = $3', [activationId, msisdn])
  }

  async recordBillingAccepted (id: string): Promise<Order> {
    return this.#update(id, 'billing_accepted_at = now()', [])
  }

  /**
   * Records the CRM's status change (when not recorded yet) and moves the order to `Active`, together:
   * the CRM step is the last. Null when the order was `Active` already (announced then).
   */
  async finishProvisioning (id: string): Promise<Order | null> {
    const { rows } = await this.pool.query<OrderRow>(
      `UPDATE orders SET crm_activated_at = coalesce(crm_activated_at, now()), status = 'Active', failure_reason = NULL, updated_at = now()
       WHERE id = $1 AND status <> 'Active' RETURNING ${COLUMNS}`,
      [id])
    return rows[0] === undefined ? null : toOrder(rows[0])
  }

  async #update (id: string, assignments: string, values: unknown[]): Promise<Order> {
    const { rows } = await this.pool.query<OrderRow>(`UPDATE orders SET ${assignments}, updated_at = now() WHERE id = $1 RETURNING ${COLUMNS}`, [id, ...values])
    if (rows[0] === undefined) throw new Error(`Order ${id} does not exist`)
    return toOrder(rows[0])
  }
}

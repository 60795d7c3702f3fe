import type { Pool } from 'pg'

/** Orders in some state, and how long the oldest has been in it (seconds; null when none is). */
export interface Counted {
  count: number
  oldestAgeSeconds: number | null
}

/** The portal orders waiting in `Pending Review`, told apart by the CRM's word as the reconciliation last read it. */
export interface PendingOrders {
  /** Their CRM order still in `Pending Review`, awaiting someone's approval: aged from when placed. */
  awaitingApproval: Counted
  /**
   * The CRM has not told their Status yet (not asked yet, or it did not answer): never taken for awaiting
   * approval; aged from when placed.
   */
  unknown: Counted
  /** Approved in the CRM, their platform event not received: aged from when the reconciliation found them approved. */
  approvedNotReceived: Counted
}

/** What the CRM said of an order still in `Pending Review`: its Status, null when it has no such order. */
export interface CrmStatusSeen {
  id: string
  crmStatus: string | null
  /** The Status has left Pending Review, and is neither Activated nor a cancelled one. */
  approved: boolean
}

/** An order's CRM status recorded. */
export interface CrmStatusRecorded {
  id: string
  crmOrderId: string
  crmStatus: string | null
  /** Found approved for the first time. */
  newlyApproved: boolean
  /** Asked for the first time, or the Status differs from the one last read. */
  statusChanged: boolean
}

/**
 * The orders in `Pending Review` as the CRM's word tells them apart: which to ask the CRM about,
 * what it said, and the counts the reports give. Beside the orders table's store, on the same table.
 */
export class PendingOrderStore {
  constructor (private readonly pool: Pool) {}

  /** How many wait, and since when, told apart by the CRM's word. */
  async count (): Promise<PendingOrders> {
    type Row = {
      awaiting: number
      awaiting_oldest: number | null
      approved: number
      approved_oldest: number | null
      unknown: number
      unknown_oldest: number | null
    }
    const awaiting = "crm_approved_at IS NULL AND crm_status = 'Pending Review'"
    const unknown = 'crm_approved_at IS NULL AND crm_status_checked_at IS NULL'
    const { rows } = await this.pool.query<Row>(
      `SELECT count(*) FILTER (WHERE ${awaiting})::int AS awaiting,
         extract(epoch FROM now() - min(created_at) FILTER (WHERE ${awaiting}))::float8 AS awaiting_oldest,
         count(crm_approved_at)::int AS approved,
         extract(epoch FROM now() - min(crm_approved_at))::float8 AS approved_oldest,
         count(*) FILTER (WHERE ${unknown})::int AS unknown,
         extract(epoch FROM now() - min(created_at) FILTER (WHERE ${unknown}))::float8 AS unknown_oldest
       FROM orders
       WHERE status = 'Pending Review' AND crm_order_id IS NOT NULL AND (crm_approved_at IS NOT NULL
         OR (provisioning_requested_at IS NULL AND (crm_status = 'Pending Review' OR crm_status_checked_at IS NULL)))`)
    const row = rows[0]
    return {
      awaitingApproval: { count: row?.awaiting ?? 0, oldestAgeSeconds: row?.awaiting_oldest ?? null },
      approvedNotReceived: { count: row?.approved ?? 0, oldestAgeSeconds: row?.approved_oldest ?? null },
      unknown: { count: row?.unknown ?? 0, oldestAgeSeconds: row?.unknown_oldest ?? null }
    }
  }

  /**
   * Up to `limit` orders in `Pending Review` that no event handed to the job queue, for the CRM to
   * say where they stand: those not asked for longest first (never asked first, oldest first), so
   * that past `limit` every one still comes in turn.
   */
  async dueForCrmStatus (limit: number): Promise<Array<{ id: string, crmOrderId: string }>> {
    const { rows } = await this.pool.query<{ id: string, crm_order_id: string }>(
      `SELECT id, crm_order_id FROM orders
       WHERE status = 'Pending Review' AND crm_order_id IS NOT NULL AND provisioning_requested_at IS NULL
       ORDER BY crm_status_checked_at NULLS FIRST, created_at LIMIT $1`,
      [limit])
    return rows.map((row) => ({ id: row.id, crmOrderId: row.crm_order_id }))
  }

  /**
   * Records what the CRM said of each order, in one statement, for those still in `Pending Review`
   * that no event handed off meanwhile (the others are left out of the answer). An order is found
   * newly approved once: concurrent runs wait for each other's rows, and see the first one's mark.
   */
  async recordCrmStatuses (seen: readonly CrmStatusSeen[]): Promise<CrmStatusRecorded[]> {
    type Row = {
      id: string
      crm_order_id: string
      crm_status: string | null
      newly_approved: boolean
      status_changed: boolean
    }
    const { rows } = await this.pool.query<Row>(
      `WITH seen AS (
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::boolean[]) AS seen (id, crm_status, approved)
       ), previous AS (
         SELECT orders.id, orders.crm_status, orders.crm_status_checked_at, orders.crm_approved_at
         FROM orders JOIN seen USING (id) ORDER BY orders.id FOR UPDATE OF orders
       )
       UPDATE orders SET crm_status = seen.crm_status, crm_status_checked_at = now(),
         crm_approved_at = CASE WHEN seen.approved THEN coalesce(previous.crm_approved_at, now()) END
       FROM seen JOIN previous USING (id)
       WHERE orders.id = seen.id AND orders.status = 'Pending Review' AND orders.provisioning_requested_at IS NULL
       RETURNING orders.id, orders.crm_order_id, seen.crm_status,
         seen.approved AND previous.crm_approved_at IS NULL AS newly_approved,
         previous.crm_status_checked_at IS NULL OR previous.crm_status IS DISTINCT FROM seen.crm_status AS status_changed`,
      [seen.map((order) => order.id), seen.map((order) => order.crmStatus), seen.map((order) => order.approved)])
    return rows.map((row) => ({
      id: row.id,
      crmOrderId: row.crm_order_id,
      crmStatus: row.crm_status,
      newlyApproved: row.newly_approved,
      statusChanged: row.status_changed
    }))
  }
}

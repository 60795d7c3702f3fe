import type { Pool } from 'pg'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'

/**
 * Why an event's hand-off fails for good, whatever the retry: its CRM order carries a billing order
 * another stored order has; it lacks its billing order; the CRM does not have it.
 */
export const PARK_REASONS = ['billing_order_conflict', 'order_incomplete', 'order_unknown'] as const
export type ParkReason = typeof PARK_REASONS[number]

/** A hand-off that a retry would not change until someone mends the data: the event is parked, never refused. */
export class HandOffRefused extends Error {
  constructor (readonly reason: ParkReason, message: string) {
    super(message)
    this.name = 'HandOffRefused'
  }
}

// PostgreSQL's unique_violation, on the billing order id of migration 001.
const BILLING_ORDER_UNIQUE = 'orders_billing_order_id_key'

/** Whether a statement failed because another stored order has the same billing order id. */
export function isBillingOrderConflict (error: unknown): boolean {
  const { code, constraint } = (error ?? {}) as { code?: unknown, constraint?: unknown }
  return code === '23505' && constraint === BILLING_ORDER_UNIQUE
}

export interface ParkedEvent {
  id: string
  channel: string
  replayId: number
  crmOrderId: string
  event: PlatformEventMessage
  reason: ParkReason
  detail: string
  parkedAt: string
  retries: number
  retriedAt: string | null
}

interface ParkedRow {
  id: string
  channel: string
  replay_id: string
  crm_order_id: string
  event: PlatformEventMessage
  reason: ParkReason
  detail: string
  parked_at: Date
  retries: number
  retried_at: Date | null
}

const COLUMNS = 'id, channel, replay_id, crm_order_id, event, reason, detail, parked_at, retries, retried_at'

function toParked (row: ParkedRow): ParkedEvent {
  return {
    id: row.id,
    channel: row.channel,
    replayId: Number(row.replay_id),
    crmOrderId: row.crm_order_id,
    event: row.event,
    reason: row.reason,
    detail: row.detail,
    parkedAt: row.parked_at.toISOString(),
    retries: row.retries,
    retriedAt: row.retried_at?.toISOString() ?? null
  }
}

/** How long a count is reused: probes and scrapes ask often, and the figure moves seldom. */
const COUNT_REUSE_MS = 1000

/**
 * The platform events set aside because their hand-off failed for good, one row per CRM order, in
 * PostgreSQL: every instance counts the same ones, and an operator may retry one from any instance.
 */
export class ParkedEvents {
  #counting: Promise<number> | undefined
  #counted: { value: number, at: number } | undefined

  constructor (private readonly pool: Pool) {}

  /** Sets the event aside; a later event for the same order replaces the earlier one. */
  async park (
    channel: string,
    crmOrderId: string,
    event: PlatformEventMessage,
    refusal: HandOffRefused
  ): Promise<ParkedEvent> {
    const { rows } = await this.pool.query<ParkedRow>(
      `INSERT INTO parked_events (channel, replay_id, crm_order_id, event, reason, detail) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (crm_order_id) DO UPDATE SET channel = EXCLUDED.channel, replay_id = EXCLUDED.replay_id, event = EXCLUDED.event,
         reason = EXCLUDED.reason, detail = EXCLUDED.detail, parked_at = now()
       RETURNING ${COLUMNS}`,
      [channel, event.data.event.replayId, crmOrderId, JSON.stringify(event), refusal.reason, refusal.message])
    this.#counted = undefined
    return toParked(rows[0]!)
  }

  /** The oldest first, and how many there are. */
  async list (limit: number, offset: number): Promise<{ events: ParkedEvent[], total: number }> {
    const [{ rows }, total] = await Promise.all([
      this.pool.query<ParkedRow>(`SELECT ${COLUMNS} FROM parked_events ORDER BY parked_at, id LIMIT $1 OFFSET $2`, [limit, offset]),
      this.#count()
    ])
    return { events: rows.map(toParked), total }
  }

  async find (id: string): Promise<ParkedEvent | null> {
    const { rows } = await this.pool.query<ParkedRow>(`SELECT ${COLUMNS} FROM parked_events WHERE id = $1`, [id])
    return rows[0] === undefined ? null : toParked(rows[0])
  }

  /** How many are parked, reused for a second: probes and scrapes do not each ask PostgreSQL. */
  async count (): Promise<number> {
    if (this.#counted !== undefined && performance.now() - this.#counted.at < COUNT_REUSE_MS) return this.#counted.value
    return await this.#count()
  }

  /** Records a retry that failed for good again, with its reason now; null when the row is gone. */
  async retryRefused (id: string, refusal: HandOffRefused): Promise<ParkedEvent | null> {
    const { rows } = await this.pool.query<ParkedRow>(
      `UPDATE parked_events SET reason = $2, detail = $3, retries = retries + 1, retried_at = now() WHERE id = $1 RETURNING ${COLUMNS}`,
      [id, refusal.reason, refusal.message])
    return rows[0] === undefined ? null : toParked(rows[0])
  }

  /** Removes one (handed off at last, or discarded by an operator); false when it was not parked. */
  async remove (id: string): Promise<boolean> {
    const { rowCount } = await this.pool.query('DELETE FROM parked_events WHERE id = $1', [id])
    this.#counted = undefined
    return rowCount === 1
  }

  /** An event for this order was handed off: whatever was parked for it is done with. */
  async release (crmOrderId: string): Promise<void> {
    const { rowCount } = await this.pool.query('DELETE FROM parked_events WHERE crm_order_id = $1', [crmOrderId])
    if (rowCount !== 0) this.#counted = undefined
  }

  #count (): Promise<number> {
    this.#counting ??= this.pool.query<{ count: number }>('SELECT count(*)::int AS count FROM parked_events')
      .then(({ rows }) => {
        const value = rows[0]?.count ?? 0
        this.#counted = { value, at: performance.now() }
        return value
      })
      .finally(() => { this.#counting = undefined })
    return this.#counting
  }
}

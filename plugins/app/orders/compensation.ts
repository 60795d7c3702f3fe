import type { FastifyBaseLogger } from 'fastify'
import { classifyFailure } from '../../../lib/errors.js'
import { OrderNotPendingError } from '../../../integrations/billing/errors.js'
import type { BillingOrderSummary } from '../../../integrations/billing/mapping.js'
import type { OrderPlacementUpstreams } from './placement-upstreams.js'
import type { OrderStatusChanges } from './status-changes.js'
import type { Placement, PlacementStore } from './placement-store.js'

export interface CompensationOptions {
  placements: PlacementStore
  statusChanges: OrderStatusChanges
  upstreams: Pick<OrderPlacementUpstreams, 'cancelBillingOrder' | 'pendingBillingOrders'>
  log: FastifyBaseLogger
}

/** Undoing a placement that will not go on: its billing order and invoice cancelled in billing. */
export class Compensation {
  constructor (private readonly options: CompensationOptions) {}

  /** Cancels the placement's billing order (found first when its AddOrder answer was lost). */
  async compensate (placement: Placement): Promise<void> {
    const { upstreams, placements, log } = this.options
    const { id } = placement.order
    const billingOrderId =
      placement.order.billingOrderId ?? (await this.findLostBillingOrder(placement))?.orderId ?? null
    if (billingOrderId !== null) {
      try {
        const outcome = await upstreams.cancelBillingOrder(billingOrderId)
        log.warn(
          { orderId: id, billingOrderId, outcome },
          'cancelled the billing order of a placement that did not go on'
        )
      } catch (error) {
        if (!(error instanceof OrderNotPendingError)) throw error
        // Accepted meanwhile, though no CRM order exists: an operator must look at it.
        log.error(
          { orderId: id, billingOrderId },
          'the billing order of a placement that did not go on was accepted in billing and cannot be cancelled'
        )
      }
    }
    const published = await placements.compensated(id)
    if (published !== null) await this.options.statusChanges.publish(published.order)
  }

  /** Cancels at once a billing order whose placement could not be recorded: only this request knows it. */
  async cancelUnrecorded (billingOrderId: number): Promise<void> {
    try {
      await this.options.upstreams.cancelBillingOrder(billingOrderId)
      this.options.log.warn({ billingOrderId }, 'cancelled a billing order whose placement could not be recorded')
    } catch (error) {
      // The recovery finds it among the client's pending orders.
      this.options.log.error(
        { billingOrderId, failure: classifyFailure(error) },
        'a billing order whose placement could not be recorded is left to the recovery'
      )
    }
  }

  /**
   * The billing order a lost AddOrder answer was about, recorded as the placement's: the client's
   * oldest pending order newer than the placement's floor that no stored order holds. Null when
   * there is none (nothing was placed), or no floor to tell it apart by.
   */
  async findLostBillingOrder (placement: Placement): Promise<BillingOrderSummary | null> {
    const { upstreams, placements } = this.options
    const clientId = placement.order.billingClientId!
    if (placement.billingFloor === null) {
      // No billing order was known yet: any of the client's pending orders could be one placed elsewhere.
      this.options.log.error(
        { orderId: placement.order.id, billingClientId: clientId },
        'the billing order of an interrupted placement cannot be told apart: check the client\'s pending orders in billing'
      )
      return null
    }
    const pending = (await upstreams.pendingBillingOrders(clientId))
      .filter((order) => order.orderId > placement.billingFloor!)
      .sort((a, b) => a.orderId - b.orderId)
    if (pending.length === 0) return null
    const held = await placements.heldBillingOrderIds(pending.map((order) => order.orderId))
    for (const candidate of pending) {
      if (!held.has(candidate.orderId) && (await placements.adoptBillingOrder(placement.order.id, candidate.orderId))) {
        return candidate
      }
    }
    return null
  }
}

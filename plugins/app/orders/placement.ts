import type { FastifyBaseLogger } from 'fastify'
import {
  BillingUnavailableError, OrderCancelledError, OrderIncompleteError, OrderRejectedError, UpstreamFailure, UpstreamRefusal, classifyFailure
} from '../../../lib/errors.js'
import { QueueFullError } from '../../../lib/request-queue.js'
import { CrmApiError } from '../../../integrations/crm/errors.js'
import { OrderNotPendingError, PaymentMethodRefusedError } from '../../../integrations/billing/errors.js'
import type { BillingOrderSummary } from '../../../integrations/billing/mapping.js'
import type { OrderStatusChanges } from './status-changes.js'
import type { Order } from './store.js'
import type { NewPlacement, Placement, PlacementStore } from './placement-store.js'

/** What the customer orders. */
export interface OrderRequest {
  clientId: number
  productId: number
  billingCycle: string
}

/** The fields of the CRM order a placed order becomes. */
export interface CrmOrderDraft {
  Name: string
  Status: 'Pending Review'
  EffectiveDate: string
  BillingOrderId__c: string
  BillingClientId__c: string
  Product__c: string
  AccountId?: string
}

/** What placing an order needs of the upstreams, each call through its request queue. */
export interface OrderPlacementUpstreams {
  /** The billing order's id; an `UpstreamRefusal` when the billing system refuses this order. */
  addBillingOrder (order: OrderRequest): Promise<{ orderId: number, invoiceId: number | null }>
  /** The CRM order's id. */
  createCrmOrder (fields: CrmOrderDraft): Promise<string>
  /** The CRM order that carries this billing order id, or null. */
  findCrmOrder (billingOrderId: number): Promise<string | null>
  /** Cancels a pending billing order and its invoice; an `OrderNotPendingError` when it went on. */
  cancelBillingOrder (billingOrderId: number): Promise<'cancelled' | 'not_found'>
  /** The client's pending billing orders. */
  pendingBillingOrders (clientId: number): Promise<BillingOrderSummary[]>
}

export interface OrderPlacementOptions {
  placements: PlacementStore
  statusChanges: OrderStatusChanges
  upstreams: OrderPlacementUpstreams
  /** The Account of the CRM orders (CRM_ORDER_ACCOUNT_ID); unset, none. */
  crmAccountId: string | undefined
  /** How long the request that places an order holds it before a recovery may take it over. */
  claimMs: number
  log: FastifyBaseLogger
}

// Failures after which the CRM surely made no order: it refused the request, or it never reached it.
const CRM_REFUSED = new Set(['auth_failed', 'quota_exceeded', 'queue_full'])
// Failures after which billing surely placed no order: the request never reached it.
const BILLING_NOT_REACHED = new Set(['auth_failed', 'queue_full'])

function causeOf (error: unknown): string {
  // A full queue is this instance's overload, not an answer of the upstream: the reason says which.
  return error instanceof QueueFullError ? 'queue_full' : classifyFailure(error)
}

/**
 * Placing an order, step by step, each step recorded before the next: the order row (placement
 * `billing`), billing AddOrder (`crm`), the CRM order in `Pending Review`, linked (`placed`). An order
 * that will not go on is `Failed` and `compensating` until its billing order is cancelled
 * (`compensated`). `place` runs the steps for a request; `resume` finishes or undoes a placement
 * that was interrupted (a crash, a database that stalled, an upstream that did not answer), and
 * is what the recovery runs: the CRM order is looked up by its billing order id before anything
 * is decided, so no placement ever makes two.
 */
export class OrderPlacement {
  constructor (private readonly options: OrderPlacementOptions) {}

  get claimMs (): number {
    return this.options.claimMs
  }

  /** Begins a placement (the order row, claimed by the caller) and runs it. */
  async place (request: OrderRequest): Promise<Order> {
    return await this.run(await this.options.placements.begin(toNewPlacement(request), this.options.claimMs), request)
  }

  /**
   * Runs a placement begun by the caller: resolves with the order placed, or rejects with what
   * happened: `ORDER_REJECTED` (billing refused it; nothing stays), `BILLING_UNAVAILABLE`,
   * `ORDER_CANCELLED` (the CRM could not take it; billing cancelled), `ORDER_INCOMPLETE` (left to the
   * recovery), or the database's error.
   */
  async run (placement: Placement, request: OrderRequest): Promise<Order> {
    const { placements, upstreams } = this.options
    const { id } = placement.order
    let placed: { orderId: number, invoiceId: number | null }
    try {
      placed = await upstreams.addBillingOrder(request)
    } catch (error) {
      return await this.#billingFailed(placement, error)
    }
    let recorded: Placement | null
    try {
      recorded = await placements.recordBilling(id, placed.orderId, placed.invoiceId)
    } catch (error) {
      // Only this request knows the billing order: undo it now, while it can.
      await this.#cancelUnrecorded(placed.orderId)
      throw error
    }
    if (recorded === null) {
      await this.#cancelUnrecorded(placed.orderId)
      throw new OrderIncompleteError()
    }
    let crmOrderId: string
    try {
      crmOrderId = await upstreams.createCrmOrder(this.#draft(recorded, placed.orderId))
    } catch (error) {
      return await this.#crmFailed(recorded, error)
    }
    return await this.#link(recorded, crmOrderId, false)
  }

  /** Finishes or undoes an interrupted placement, from whichever step it stopped at. */
  async resume (placement: Placement): Promise<void> {
    const { log } = this.options
    const { id, billingOrderId } = placement.order
    log.warn({ orderId: id, billingOrderId, placement: placement.step }, 'resuming an interrupted order placement')
    if (placement.step === 'billing') {
      // AddOrder was sent, its answer never recorded: whatever billing placed is undone.
      const abandoned = await this.options.placements.abandon(id, 'placement_interrupted: the billing order was not recorded')
      if (abandoned !== null) await this.#compensate(abandoned)
    } else if (placement.step === 'crm') {
      await this.#settleCrm(placement, 'placement_interrupted: the CRM order was not created', true)
    } else if (placement.step === 'compensating') {
      await this.#compensate(placement)
    }
  }

  /**
   * Cancels an order the CRM cancelled or rejected while it waited in `Pending Review`, and its
   * billing order with its invoice: `Cancelled` first, so that it never goes on, then billing. Should
   * billing not answer, the order stays `compensating` and the recovery cancels its billing order
   * once the claim runs out. Null when the order had moved on (an event handed it off meanwhile).
   */
  async cancel (orderId: string, reason: string): Promise<Order | null> {
    const cancelling = await this.options.placements.cancel(orderId, reason, this.options.claimMs)
    if (cancelling === null) return null
    if (cancelling.step === 'compensated') await this.options.statusChanges.publish(cancelling.order)
    else await this.#compensate(cancelling)
    return cancelling.order
  }

  async #billingFailed (placement: Placement, error: unknown): Promise<never> {
    const { placements } = this.options
    const cause = causeOf(error)
    if (error instanceof UpstreamRefusal || error instanceof PaymentMethodRefusedError || BILLING_NOT_REACHED.has(cause)) {
      await placements.discard(placement.order.id)
      throw error instanceof UpstreamRefusal ? new OrderRejectedError({ cause: error }) : new BillingUnavailableError({ cause: error })
    }
    // Unreadable, lost or cut off: billing may have placed the order, which is undone. After a
    // timeout billing may still be placing it: the recovery looks once the claim has run out.
    const abandoned = await placements.abandon(placement.order.id, `billing_${cause}: the billing order could not be confirmed`)
    if (abandoned !== null && cause !== 'timeout') await this.#compensate(abandoned).catch(() => {})
    throw error instanceof UpstreamFailure || error instanceof QueueFullError ? new BillingUnavailableError({ cause: error }) : error
  }

  async #cancelUnrecorded (billingOrderId: number): Promise<void> {
    try {
      await this.options.upstreams.cancelBillingOrder(billingOrderId)
      this.options.log.warn({ billingOrderId }, 'cancelled a billing order whose placement could not be recorded')
    } catch (error) {
      // The recovery finds it among the client's pending orders.
      this.options.log.error({ billingOrderId, failure: classifyFailure(error) }, 'a billing order whose placement could not be recorded is left to the recovery')
    }
  }

  async #crmFailed (placement: Placement, error: unknown): Promise<Order> {
    const cause = causeOf(error)
    const reason = `crm_${cause}: the CRM order could not be created`
    if (CRM_REFUSED.has(cause) || (error instanceof CrmApiError && error.status < 500)) {
      const abandoned = await this.options.placements.abandon(placement.order.id, reason)
      if (abandoned !== null && await this.#compensate(abandoned).then(() => true, () => false)) throw new OrderCancelledError({ cause: error })
      throw new OrderIncompleteError({ cause: error })
    }
    // Timed out: the CRM may still be creating it. The recovery decides once the claim runs out.
    if (cause === 'timeout') throw new OrderIncompleteError({ cause: error })
    // It answered (a 5xx) or could not be reached: whether the order exists, the CRM says.
    const settled = await this.#settleCrm(placement, reason, false).catch(() => undefined)
    if (settled === undefined) throw new OrderIncompleteError({ cause: error })
    if (settled === null) throw new OrderCancelledError({ cause: error })
    return settled
  }

  /** The CRM order found and linked (the placement goes on), or null when none exists (undone). */
  async #settleCrm (placement: Placement, reason: string, byRecovery: boolean): Promise<Order | null> {
    const { upstreams, placements } = this.options
    const billingOrderId = placement.order.billingOrderId!
    const crmOrderId = await upstreams.findCrmOrder(billingOrderId)
    if (crmOrderId !== null) return await this.#link(placement, crmOrderId, byRecovery)
    const abandoned = await placements.abandon(placement.order.id, reason)
    if (abandoned !== null) await this.#compensate(abandoned)
    return null
  }

  async #link (placement: Placement, crmOrderId: string, byRecovery: boolean): Promise<Order> {
    const linked = await this.options.placements.link(placement.order.id, crmOrderId)
    if (linked === null) {
      // Its claim ran out and a recovery undid it meanwhile: the CRM order names a cancelled billing order.
      this.options.log.error({ orderId: placement.order.id, crmOrderId, billingOrderId: placement.order.billingOrderId },
        'a CRM order was created for a placement already undone: set its Status to Cancelled')
      throw new OrderIncompleteError()
    }
    if (byRecovery) this.options.log.warn({ orderId: linked.order.id, crmOrderId }, 'the recovery linked an order placement to the CRM order it found')
    await this.options.statusChanges.publish(linked.order)
    return linked.order
  }

  /** Cancels the placement's billing order (found first when its AddOrder answer was lost). */
  async #compensate (placement: Placement): Promise<void> {
    const { upstreams, placements, log } = this.options
    const { id } = placement.order
    const billingOrderId = placement.order.billingOrderId ?? await this.#findLostBillingOrder(placement)
    if (billingOrderId !== null) {
      try {
        const outcome = await upstreams.cancelBillingOrder(billingOrderId)
        log.warn({ orderId: id, billingOrderId, outcome }, 'cancelled the billing order of a placement that did not go on')
      } catch (error) {
        if (!(error instanceof OrderNotPendingError)) throw error
        // Accepted meanwhile, though no CRM order exists: an operator must look at it.
        log.error({ orderId: id, billingOrderId }, 'the billing order of a placement that did not go on was accepted in billing and cannot be cancelled')
      }
    }
    const published = await placements.compensated(id)
    if (published !== null) await this.options.statusChanges.publish(published.order)
  }

  /**
   * The billing order a lost AddOrder answer was about: the client's oldest pending order newer
   * than the placement's floor that no stored order holds. Null when there is none: nothing was placed.
   */
  async #findLostBillingOrder (placement: Placement): Promise<number | null> {
    const { upstreams, placements } = this.options
    const clientId = placement.order.billingClientId!
    if (placement.billingFloor === null) {
      // No billing order was known yet: any of the client's pending orders could be one placed elsewhere.
      this.options.log.error({ orderId: placement.order.id, billingClientId: clientId }, 'the billing order of an interrupted placement cannot be told apart: check the client\'s pending orders in billing')
      return null
    }
    const pending = (await upstreams.pendingBillingOrders(clientId))
      .filter((order) => order.orderId > placement.billingFloor!)
      .sort((a, b) => a.orderId - b.orderId)
    if (pending.length === 0) return null
    const held = await placements.heldBillingOrderIds(pending.map((order) => order.orderId))
    for (const candidate of pending) {
      if (!held.has(candidate.orderId) && await placements.adoptBillingOrder(placement.order.id, candidate.orderId)) return candidate.orderId
    }
    return null
  }

  #draft (placement: Placement, billingOrderId: number): CrmOrderDraft {
    const { order } = placement
    return {
      Name: `Portal order ${billingOrderId}`,
      Status: 'Pending Review',
      EffectiveDate: new Date().toISOString().slice(0, 10),
      BillingOrderId__c: String(billingOrderId),
      BillingClientId__c: String(order.billingClientId),
      Product__c: order.productId,
      ...(this.options.crmAccountId === undefined ? {} : { AccountId: this.options.crmAccountId })
    }
  }
}

export function toNewPlacement ({ clientId, productId, billingCycle }: OrderRequest): NewPlacement {
  return { billingClientId: clientId, productId: String(productId), billingCycle }
}

import {
  BillingUnavailableError, OrderCancelledError, OrderIncompleteError, OrderRejectedError, UpstreamFailure,
  UpstreamRefusal, classifyFailure
} from '../../../lib/errors.js'
import { QueueFullError } from '../../../lib/request-queue.js'
import { CrmApiError } from '../../../integrations/crm/errors.js'
import { PaymentMethodRefusedError } from '../../../integrations/billing/errors.js'
import { Compensation } from './compensation.js'
import { KeyedPlacement, type KeyedPlacementOptions } from './keyed-placement.js'
import type { OrderStatusChanges } from './status-changes.js'
import type { Order } from './store.js'
import type { NewPlacement, Placement } from './placement-store.js'
import type { CrmOrderDraft, OrderPlacementUpstreams, OrderRequest } from './placement-upstreams.js'

export interface OrderPlacementOptions extends KeyedPlacementOptions {
  statusChanges: OrderStatusChanges
  upstreams: OrderPlacementUpstreams
  /** The Account of the CRM orders (CRM_ORDER_ACCOUNT_ID); unset, none. */
  crmAccountId: string | undefined
}

// Failures after which the CRM surely made no order: it refused the request, or it never reached it.
const CRM_REFUSED = new Set(['auth_failed', 'quota_exceeded', 'queue_full'])
// Failures after which billing surely placed no order: the request never reached it.
const BILLING_NOT_REACHED = new Set(['auth_failed', 'queue_full'])
// Failures that are billing's answer: whatever AddOrder did is done, nothing of it lands later.
const BILLING_ANSWERED = new Set(['http_5xx', 'upstream_error'])

function causeOf (error: unknown): string {
  // A full queue is this instance's overload, not an answer of the upstream: the reason says which.
  return error instanceof QueueFullError ? 'queue_full' : classifyFailure(error)
}

/**
 * Placing an order, step by step, each step recorded before the next: the order row (placement `billing`),
 * billing AddOrder (`crm`), the CRM order in `Pending Review`, linked (`placed`). An order that will not go
 * on is `Failed` and `compensating` until its billing order is cancelled (`compensated`). `place` runs the
 * steps for a request; `keyed` for one with an Idempotency-Key, whose placement a retry with the key
 * completes. `resume` finishes or undoes a placement that was interrupted (a crash, a database that stalled,
 * an upstream that did not answer, a key nobody retried), and is what the recovery runs: the CRM order is
 * looked up by its billing order id before anything is decided, and a create is sent only when none sent
 * before can still land, so no placement ever makes two.
 */
export class OrderPlacement {
  readonly #compensation: Compensation
  /** The placements of requests with an Idempotency-Key, and their retries. */
  readonly keyed: KeyedPlacement

  constructor (private readonly options: OrderPlacementOptions) {
    this.#compensation = new Compensation(options)
    this.keyed = new KeyedPlacement(this, this.#compensation, options)
  }

  get claimMs (): number {
    return this.options.claimMs
  }

  /** Begins a placement (the order row, claimed by the caller) and runs it. */
  async place (request: OrderRequest): Promise<Order> {
    return await this.run(
      await this.options.placements.begin(toNewPlacement(request), this.options.claimMs),
      request,
      false
    )
  }

  /**
   * Runs a placement begun for a request: resolves with the order placed, or rejects with what
   * happened: `ORDER_REJECTED` (billing refused it; nothing stays), `BILLING_UNAVAILABLE`,
   * `ORDER_CANCELLED` (the CRM could not take it; billing cancelled), `ORDER_INCOMPLETE` (left to the
   * recovery, or to a retry with the key when `keyed`), or the database's error.
   */
  async run (placement: Placement, request: OrderRequest, keyed: boolean): Promise<Order> {
    const { placements, upstreams } = this.options
    const { id } = placement.order
    let placed: { orderId: number, invoiceId: number | null }
    try {
      placed = await upstreams.addBillingOrder(request)
    } catch (error) {
      return await this.#billingFailed(placement, error, keyed)
    }
    let recorded: Placement | null
    try {
      const { claimMs, resumableMs } = this.options
      recorded = await placements.recordBilling(
        id,
        placed.orderId,
        placed.invoiceId,
        keyed ? { createLandingMs: claimMs, resumableMs } : undefined
      )
    } catch (error) {
      // Only this request knows the billing order: undo it now, while it can.
      await this.#compensation.cancelUnrecorded(placed.orderId)
      throw error
    }
    if (recorded === null) {
      // A recovery undid it meanwhile; unless a retry with its key, taking over a hold this request
      // failed to renew, found this very billing order and goes on with it.
      if ((await placements.find(id).catch(() => null))?.order.billingOrderId !== placed.orderId) {
        await this.#compensation.cancelUnrecorded(placed.orderId)
      }
      throw new OrderIncompleteError()
    }
    return await this.createCrm(recorded, keyed)
  }

  /** Finishes or undoes an interrupted placement, from whichever step it stopped at. */
  async resume (placement: Placement): Promise<void> {
    const { log } = this.options
    const { id, billingOrderId } = placement.order
    log.warn({ orderId: id, billingOrderId, placement: placement.step }, 'resuming an interrupted order placement')
    if (placement.step === 'billing') {
      // AddOrder was sent, its answer never recorded: whatever billing placed is undone.
      const abandoned = await this.options.placements.abandon(
        id,
        'placement_interrupted: the billing order was not recorded'
      )
      if (abandoned !== null) await this.#compensation.compensate(abandoned)
    } else if (placement.step === 'crm') {
      await this.#settleCrm(placement, 'placement_interrupted: the CRM order was not created', true)
    } else if (placement.step === 'compensating') {
      await this.#compensation.compensate(placement)
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
    else await this.#compensation.compensate(cancelling)
    return cancelling.order
  }

  async #billingFailed (placement: Placement, error: unknown, keyed: boolean): Promise<never> {
    const { placements } = this.options
    const cause = causeOf(error)
    if (
      error instanceof UpstreamRefusal ||
      error instanceof PaymentMethodRefusedError ||
      BILLING_NOT_REACHED.has(cause)
    ) {
      await placements.discard(placement.order.id)
      throw error instanceof UpstreamRefusal
        ? new OrderRejectedError({ cause: error })
        : new BillingUnavailableError({ cause: error })
    }
    if (keyed) {
      // Billing may have placed it: a retry with the key finds it, or sends AddOrder again once none can land.
      if (BILLING_ANSWERED.has(cause)) await placements.createSent(placement.order.id, null)
      throw new BillingUnavailableError({ cause: error })
    }
    // Unreadable, lost or cut off: billing may have placed the order, which is undone. After a
    // timeout billing may still be placing it: the recovery looks once the claim has run out.
    const abandoned = await placements.abandon(placement.order.id, `billing_${cause}: the billing order could not be confirmed`)
    if (abandoned !== null && cause !== 'timeout') await this.#compensation.compensate(abandoned).catch(() => {})
    throw error instanceof UpstreamFailure || error instanceof QueueFullError
      ? new BillingUnavailableError({ cause: error })
      : error
  }

  /** Creates the placement's CRM order and links it. */
  async createCrm (placement: Placement, keyed: boolean): Promise<Order> {
    let crmOrderId: string
    try {
      crmOrderId = await this.options.upstreams.createCrmOrder(this.#draft(placement))
    } catch (error) {
      return await (keyed ? this.#crmFailedKeyed(placement, error) : this.#crmFailed(placement, error))
    }
    return await this.link(placement, crmOrderId, false)
  }

  /**
   * The CRM did not create a keyed placement's order: it stays for a retry with its key, unless the
   * CRM says the order exists after all. Once the CRM answered, no create of it can still land.
   */
  async #crmFailedKeyed (placement: Placement, error: unknown): Promise<Order> {
    const cause = causeOf(error)
    // Timed out: the CRM may still be creating it, until the bound recorded with the create.
    if (cause === 'timeout') throw new OrderIncompleteError({ cause: error })
    const refused = CRM_REFUSED.has(cause) || (error instanceof CrmApiError && error.status < 500)
    const found = refused
      ? null
      : await this.options.upstreams.findCrmOrder(placement.order.billingOrderId!).catch(() => undefined)
    if (typeof found === 'string') return await this.link(placement, found, false)
    if (found === null || error instanceof CrmApiError) {
      await this.options.placements.createSent(placement.order.id, null)
    }
    throw new OrderIncompleteError({ cause: error })
  }

  async #crmFailed (placement: Placement, error: unknown): Promise<Order> {
    const cause = causeOf(error)
    const reason = `crm_${cause}: the CRM order could not be created`
    if (CRM_REFUSED.has(cause) || (error instanceof CrmApiError && error.status < 500)) {
      const abandoned = await this.options.placements.abandon(placement.order.id, reason)
      const compensated = abandoned !== null &&
        await this.#compensation.compensate(abandoned).then(() => true, () => false)
      if (compensated) throw new OrderCancelledError({ cause: error })
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
    if (crmOrderId !== null) return await this.link(placement, crmOrderId, byRecovery)
    const abandoned = await placements.abandon(placement.order.id, reason)
    if (abandoned !== null) await this.#compensation.compensate(abandoned)
    return null
  }

  /** Links the placement to its CRM order: it goes on. */
  async link (placement: Placement, crmOrderId: string, byRecovery: boolean): Promise<Order> {
    const linked = await this.options.placements.link(placement.order.id, crmOrderId)
    if (linked === null) {
      // Its claim ran out and a recovery undid it meanwhile: the CRM order names a cancelled billing order.
      this.options.log.error(
        { orderId: placement.order.id, crmOrderId, billingOrderId: placement.order.billingOrderId },
        'a CRM order was created for a placement already undone: set its Status to Cancelled'
      )
      throw new OrderIncompleteError()
    }
    if (byRecovery) {
      this.options.log.warn(
        { orderId: linked.order.id, crmOrderId },
        'the recovery linked an order placement to the CRM order it found'
      )
    }
    await this.options.statusChanges.publish(linked.order)
    return linked.order
  }

  #draft (placement: Placement): CrmOrderDraft {
    const { order } = placement
    const billingOrderId = order.billingOrderId!
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

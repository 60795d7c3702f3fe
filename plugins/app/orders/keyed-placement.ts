import type { FastifyBaseLogger } from 'fastify'
import { BillingUnavailableError, OrderIncompleteError } from '../../../lib/errors.js'
import type { Compensation } from './compensation.js'
import type { OrderPlacement } from './placement.js'
import type { Lease, Placement, PlacementStore } from './placement-store.js'
import type { OrderPlacementUpstreams, OrderRequest } from './placement-upstreams.js'
import type { Order } from './store.js'

export interface KeyedPlacementOptions {
  placements: PlacementStore
  upstreams: Pick<OrderPlacementUpstreams, 'findCrmOrder'>
  /**
   * How long the request that places an order holds it before a recovery may take it over; and how
   * long a create sent for it may still land after it was sent.
   */
  claimMs: number
  /** How long a request's hold on a keyed placement lasts unrenewed: a retry with its key takes it over after. */
  leaseMs: number
  /** How long a keyed placement interrupted after billing took the order waits for a retry with its key. */
  resumableMs: number
  log: FastifyBaseLogger
}

/** The retry must come again: a create sent earlier may still land, as the CRM or billing will soon show. */
export interface Busy {
  retryAfterSeconds: number
}

function busy (landingMs: number): Busy {
  return { retryAfterSeconds: Math.max(1, Math.min(2, Math.ceil(landingMs / 1000))) }
}

/**
 * The placements of requests with an Idempotency-Key (contract §11: one key, one billing order):
 * each is held by a short lease while a request runs it, and a retry with the key completes it
 * from where it stopped, taking it over once the lease has run out.
 */
export class KeyedPlacement {
  constructor (
    private readonly placement: OrderPlacement,
    private readonly compensation: Compensation,
    private readonly options: KeyedPlacementOptions
  ) {}

  get leaseMs (): number {
    return this.options.leaseMs
  }

  /**
   * Runs a placement begun for a request with an Idempotency-Key, held by `lease` while it runs. A
   * failure it may not be done with keeps it for a retry with the key (5xx).
   */
  async place (placement: Placement, request: OrderRequest, lease: Lease): Promise<Order> {
    return await this.#held(placement, lease, () => this.placement.run(placement, request, true))
  }

  /**
   * Completes a keyed placement that a retry with its key took over, from where it stopped: the
   * billing order its lost AddOrder placed, found (or AddOrder again once none can land), then its CRM
   * order found, or created when none exists and none can land, then linked. The retry must come
   * again (`Busy`) while a create sent earlier may still land.
   */
  async resume (placement: Placement, lease: Lease): Promise<Order | Busy> {
    return await this.#held(placement, lease, () =>
      placement.step === 'billing' ? this.#resumeBilling(placement) : this.#resumeCrm(placement)
    )
  }

  async #resumeBilling (placement: Placement): Promise<Order | Busy> {
    const { placements, claimMs, resumableMs } = this.options
    const { order } = placement
    let found: { orderId: number, invoiceId: number | null } | null
    try {
      found =
        order.billingOrderId !== null
          ? { orderId: order.billingOrderId, invoiceId: placement.billingInvoiceId }
          : await this.compensation.findLostBillingOrder(placement)
    } catch (error) {
      throw new BillingUnavailableError({ cause: error })
    }
    if (found === null) {
      // None found, and none can land any more: nothing was placed (or, without a floor, nothing the
      // service can tell apart, which it logged for an operator, as the recovery would).
      if (placement.createLandingMs > 0) return busy(placement.createLandingMs)
      await placements.createSent(order.id, claimMs)
      return await this.placement.run(
        placement,
        { clientId: order.billingClientId!, productId: Number(order.productId), billingCycle: order.billingCycle! },
        true
      )
    }
    const recorded = await placements.recordBilling(order.id, found.orderId, found.invoiceId, {
      createLandingMs: claimMs,
      resumableMs
    })
    if (recorded === null) throw new OrderIncompleteError()
    return await this.placement.createCrm(recorded, true)
  }

  async #resumeCrm (placement: Placement): Promise<Order | Busy> {
    let crmOrderId: string | null
    try {
      crmOrderId = await this.options.upstreams.findCrmOrder(placement.order.billingOrderId!)
    } catch (error) {
      throw new OrderIncompleteError({ cause: error })
    }
    if (crmOrderId !== null) return await this.placement.link(placement, crmOrderId, false)
    // Creating one now could make two: the CRM says soon whether the earlier one landed.
    if (placement.createLandingMs > 0) return busy(placement.createLandingMs)
    await this.options.placements.createSent(placement.order.id, this.options.claimMs)
    return await this.placement.createCrm(placement, true)
  }

  /**
   * Runs `work` while `lease` holds the placement, renewed at a third of its length (a late renewal
   * or two do not lose it), then lets a retry take it at once. Should this instance die, the lease
   * runs out and a retry with the key takes the placement over.
   */
  async #held<T> (placement: Placement, lease: Lease, work: () => Promise<T>): Promise<T> {
    const { placements, log } = this.options
    const { id } = placement.order
    const renewal = setInterval(() => {
      placements.renewLease(id, lease).then((held) => {
        if (!held) {
          log.warn(
            { orderId: id },
            'an order placement\'s hold ran out before it was renewed: a retry may take it over'
          )
        }
      }, () => {})
    }, lease.leaseMs / 3).unref()
    try {
      return await work()
    } finally {
      clearInterval(renewal)
      await placements.releaseLease(id, lease, this.options.resumableMs)
        .catch(() => log.warn(
          { orderId: id },
          'an order placement\'s hold could not be given up; a retry takes it over once it runs out'
        ))
    }
  }
}

import { BillingUnavailableError, CrmUnavailableError, OrderRejectedError, UpstreamFailure, UpstreamRefusal, classifyFailure } from '../../../lib/errors.js'
import { QueueFullError } from '../../../lib/request-queue.js'
import type { OrderEvents } from './status-events.js'
import type { Order, OrderStore } from './store.js'

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
  addBillingOrder (order: OrderRequest): Promise<{ orderId: number }>
  /** The CRM order's id. */
  createCrmOrder (fields: CrmOrderDraft): Promise<string>
}

export interface OrderPlacementOptions {
  store: OrderStore
  events: OrderEvents
  upstreams: OrderPlacementUpstreams
  /** The Account of the CRM orders (CRM_ORDER_ACCOUNT_ID); unset, none. */
  crmAccountId: string | undefined
}

/**
 * Placing an order: the billing order first (nothing is stored when the billing system refuses it
 * or is away), then the stored order, then its CRM order in `Pending Review`, whose platform event
 * starts provisioning. A CRM failure leaves the order stored as `Failed`, with the reason.
 */
export class OrderPlacement {
  constructor (private readonly options: OrderPlacementOptions) {}

  async place (request: OrderRequest): Promise<Order> {
    const { store, events, upstreams, crmAccountId } = this.options
    const placed = await upstreams.addBillingOrder(request).catch((error: unknown) => {
      // A refusal is the billing system's answer about this order; anything else (an answer that
      // cannot be read included: the order may have been placed) is it being unavailable.
      if (error instanceof UpstreamRefusal) throw new OrderRejectedError({ cause: error })
      throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
    })
    const { clientId, productId, billingCycle } = request
    const order = await store.create({ billingClientId: clientId, productId: String(productId), billingCycle, billingOrderId: placed.orderId, crmOrderId: null })
    let crmOrderId: string
    try {
      crmOrderId = await upstreams.createCrmOrder({
        Name: `Portal order ${placed.orderId}`,
        Status: 'Pending Review',
        EffectiveDate: new Date().toISOString().slice(0, 10),
        BillingOrderId__c: String(placed.orderId),
        BillingClientId__c: String(clientId),
        Product__c: String(productId),
        ...(crmAccountId === undefined ? {} : { AccountId: crmAccountId })
      })
    } catch (error) {
      // A full queue is this instance's overload, not an answer of the CRM: the reason says which.
      const cause = error instanceof QueueFullError ? 'queue_full' : classifyFailure(error)
      const failed = await store.changeStatus(order.id, 'Failed', `crm_${cause}: the CRM order could not be created`)
      if (failed !== null) await events.publish(failed)
      throw error instanceof UpstreamFailure ? new CrmUnavailableError({ cause: error }) : error
    }
    const stored = await store.setCrmOrderId(order.id, crmOrderId)
    await events.publish(stored)
    return stored
  }
}

import type { BillingOrderSummary } from '../../../integrations/billing/mapping.js'

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

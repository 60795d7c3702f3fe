import type { FastifyInstance } from 'fastify'
import { BillingClient } from '../../integrations/billing/client.js'
import type { Sandbox } from '../../dev/sandbox/index.js'
import { bearer } from './tokens.js'

/** A portal order of product 1, monthly, placed through the API; anything but 201 throws. */
export async function placeOrder (app: FastifyInstance, token: string) {
  const response = await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: { productId: 1, billingCycle: 'monthly' } })
  if (response.statusCode !== 201) throw new Error(`order failed: ${response.statusCode} ${response.body}`)
  return response.json()
}

/**
 * An order as the reconciliation leaves one it found approved in the CRM while no job has taken it
 * yet (the job queue down, say): approved `seconds` ago, as far as the service knows.
 */
export const approvedAgo = (app: FastifyInstance, id: string, seconds: number) =>
  app.pg.query(`UPDATE orders SET crm_status = 'Approved', crm_status_checked_at = now(), provisioning_requested_at = now(),
    crm_approved_at = now() - make_interval(secs => $2) WHERE id = $1`, [id, seconds])

/** The state the reconciliation leaves when the CRM says the order still awaits approval. */
export const awaitingApproval = (app: FastifyInstance, id: string) =>
  app.pg.query('UPDATE orders SET crm_status = \'Pending Review\', crm_status_checked_at = now() WHERE id = $1', [id])

/** A sandbox CRM whose long polls end within a second, for tests that wait on the subscription. */
export const STREAMING = { crm: { streaming: { connectTimeoutMs: 1000 } } }
/** The platform-event subscription on, with a short lease, for tests that break and heal it. */
export const EVENTS_ON = { CRM_EVENTS_ENABLED: 'true', CRM_EVENTS_CONNECT_MARGIN_MS: '500', CRM_EVENTS_LEASE_TTL_MS: '3000' }

export async function allActive (app: FastifyInstance, crmOrderIds: string[]): Promise<boolean> {
  const orders = await Promise.all(crmOrderIds.map((id) => app.orders.store.findByCrmId(id)))
  return orders.every((order) => order?.status === 'Active')
}

/** The `events` part of GET /health/queues. */
export async function eventsReport (app: FastifyInstance) {
  return (await app.inject('/health/queues')).json().events
}

/** Orders pending in billing and in Pending Review in the CRM, as the portal would have left them. */
export async function seedCrmOrders (sandbox: Sandbox, count: number): Promise<string[]> {
  const billing = new BillingClient({
    url: sandbox.settings.BILLING_API_URL!,
    identifier: sandbox.settings.BILLING_API_IDENTIFIER!,
    secret: sandbox.settings.BILLING_API_SECRET!
  })
  const ids: string[] = []
  try {
    for (let i = 0; i < count; i++) {
      const { orderId } = await billing.addOrder({ clientId: 1, productId: 1, billingCycle: 'monthly' })
      ids.push(sandbox.crm.putOrder({ Name: `Order ${orderId}`, Status: 'Pending Review', BillingOrderId__c: String(orderId), BillingClientId__c: '1', Product__c: '1' }))
    }
  } finally {
    await billing.close()
  }
  return ids
}

/** What the upstreams saw: activations per telecom key, accepted billing orders, activated CRM orders. */
export function provisioningOutcome (sandbox: Sandbox, crmOrderIds: string[]) {
  const keys = new Map(sandbox.telecom.idempotencyKeys.map((use) => [use.key, use.uses]))
  const billingOrderIds = new Set(crmOrderIds.map((id) => Number(sandbox.crm.order(id)?.BillingOrderId__c)))
  return {
    activations: sandbox.telecom.activations.filter((activation) => crmOrderIds.includes(activation.orderId)).length,
    distinctKeys: crmOrderIds.filter((id) => keys.has(id)).length,
    keysUsedOnce: crmOrderIds.filter((id) => keys.get(id) === 1).length,
    billingAccepted: sandbox.billing.orders.filter((order) => billingOrderIds.has(order.id) && order.status === 'Active').length,
    crmActivated: crmOrderIds.filter((id) => sandbox.crm.order(id)?.Status === 'Activated').length
  }
}

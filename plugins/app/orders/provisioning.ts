import type { FastifyBaseLogger } from 'fastify'
import { BillingRefusal, OrderNotPendingError } from '../../../integrations/billing/errors.js'
import type { CrmOrderFields } from '../../../integrations/crm/client.js'
import type { Activation, ActivationRequest } from '../../../integrations/telecom/client.js'
import type { Deadline } from '../../../lib/deadline.js'
import { UpstreamFailure, classifyFailure } from '../../../lib/errors.js'
import { inSpan } from '../../../lib/tracing.js'
import type { OrderStatusChanges } from './status-changes.js'
import type { Order, OrderStatus, OrderStore } from './store.js'

/** The BullMQ job states the provisioning job queue reports. */
export const JOB_STATES = ['waiting', 'active', 'delayed', 'failed', 'completed'] as const

/** The provisioning job queue's counts, by job state, and its recent failures. */
export type JobCounts = Record<typeof JOB_STATES[number], number> & {
  /** Jobs that failed for good within the recent window: what the queue's health is judged on. */
  recentFailed: number
}

/** Work run in a slot of an upstream's request queue, within the request's deadline. */
interface Queue {
  run<T> (task: (deadline: Deadline) => Promise<T>): Promise<T>
}

/** What provisioning needs of each upstream. */
export interface ProvisioningDependencies {
  orders: OrderStore
  statusChanges: OrderStatusChanges
  billing: {
    acceptOrder (billingOrderId: number, deadline: Deadline): Promise<void>
    /** The billing order's status; null when there is no such order. */
    getOrderStatus (billingOrderId: number, deadline: Deadline): Promise<string | null>
  }
  crm: { updateOrder (crmOrderId: string, fields: CrmOrderFields, deadline: Deadline): Promise<void> }
  telecom: { activate (request: ActivationRequest): Promise<Activation> }
  billingQueue: Queue
  crmQueue: Queue
  log: FastifyBaseLogger
}

export class OrderNotStoredError extends Error {
  constructor (crmOrderId: string) {
    super(`No stored order for CRM order ${crmOrderId}`)
    this.name = 'OrderNotStoredError'
  }
}

async function changeStatus (
  deps: ProvisioningDependencies,
  order: Order,
  status: OrderStatus,
  failureReason: string | null = null
): Promise<Order> {
  const changed = await deps.orders.changeStatus(order.id, status, failureReason)
  if (changed === null) return order
  await deps.statusChanges.publish(changed)
  return changed
}

export type ProvisioningStep = 'telecom activation' | 'billing acceptance' | 'CRM update'

/**
 * One step of provisioning, a span named after it with its outcome: `done`, `skipped` (recorded as
 * done by an earlier attempt, or nothing to do) or the failure's class.
 */
async function step<T> (name: ProvisioningStep, skipped: boolean, work: () => Promise<T>): Promise<T | undefined> {
  return await inSpan(`provisioning step: ${name}`, { attributes: { 'provisioning.step': name } }, async (span) => {
    if (skipped) {
      span?.setAttribute('provisioning.step.outcome', 'skipped')
      return undefined
    }
    try {
      const result = await work()
      span?.setAttribute('provisioning.step.outcome', 'done')
      return result
    } catch (error) {
      span?.setAttribute('provisioning.step.outcome', classifyFailure(error))
      throw error
    }
  })
}

/**
 * Provisions one order: telecom activation, billing AcceptOrder, CRM status. Each completed step is
 * recorded before the next starts, so a retry after a failure or a crash repeats none of them.
 */
export async function provisionOrder (deps: ProvisioningDependencies, crmOrderId: string): Promise<void> {
  const started = await deps.orders.startProvisioning(crmOrderId)
  if (started === null) {
    // Active already (a replayed event's job), or not stored.
    if (await deps.orders.findByCrmId(crmOrderId) === null) throw new OrderNotStoredError(crmOrderId)
    return
  }
  let { order } = started
  if (started.statusChanged) await deps.statusChanges.publish(order)

  await step('telecom activation', order.telecomActivationId !== null, async () => {
    // The CRM order id is the idempotency key: a repeat returns the first activation.
    const activation = await deps.telecom.activate({
      orderId: crmOrderId,
      productId: order.productId,
      idempotencyKey: crmOrderId
    })
    order = await deps.orders.recordActivation(order.id, activation.id, activation.msisdn)
  })

  const billingOrderId = order.billingOrderId
  await step('billing acceptance', order.billingAcceptedAt !== null || billingOrderId === null, async () => {
    if (billingOrderId === null) return
    await deps.billingQueue.run(async (deadline) => {
      try {
        await deps.billing.acceptOrder(billingOrderId, deadline)
      } catch (error) {
        if (!(error instanceof OrderNotPendingError)) throw error
        // Accepted before a crash lost the record of it, or cancelled: the order's status tells.
        const status = await deps.billing.getOrderStatus(billingOrderId, deadline).catch((lookupError: unknown) => {
          // GetOrders refused as an action (not in the contract's list, so an API role may not allow
          // it): the order this service placed, now not pending, is most likely the one it accepted.
          if (
            lookupError instanceof BillingRefusal ||
            (lookupError instanceof UpstreamFailure && lookupError.failure === 'auth_failed')
          ) {
            return undefined
          }
          throw lookupError
        })
        if (status === undefined) {
          deps.log.warn(
            { crmOrderId, billingOrderId },
            'AcceptOrder: the billing order is not pending, and GetOrders is refused: taken as accepted'
          )
        } else if (status !== 'Active') {
          throw new UpstreamFailure('upstream_error', 'billing', `billing order ${billingOrderId} is ${status ?? 'missing'}, not pending or active`)
        }
      }
    })
    order = await deps.orders.recordBillingAccepted(order.id)
  })

  // The last step is recorded with the order's Active status: until then the order is not Active,
  // and a repeat of this PATCH sets the same status again.
  const active = await step('CRM update', false, async () => {
    await deps.crmQueue.run((deadline) => deps.crm.updateOrder(crmOrderId, { Status: 'Activated' }, deadline))
    return await deps.orders.finishProvisioning(order.id)
  })
  // Null: another run of this job, which had lost its lock, made it Active and announced it first.
  if (active === null || active === undefined) return
  await deps.statusChanges.publish(active)
  deps.log.info({ orderId: active.id, crmOrderId, attempts: active.provisioningAttempts }, 'order provisioned')
}

/** After the last attempt: the order is Failed, with the reason kept. */
export async function failOrder (deps: ProvisioningDependencies, crmOrderId: string, reason: string): Promise<void> {
  const order = await deps.orders.findByCrmId(crmOrderId)
  if (order === null || order.status === 'Active') return
  await changeStatus(deps, order, 'Failed', reason)
  await deps.crmQueue
    .run((deadline) => deps.crm.updateOrder(crmOrderId, { Provisioning_Error__c: reason.slice(0, 255) }, deadline))
    .catch(() => {})
}

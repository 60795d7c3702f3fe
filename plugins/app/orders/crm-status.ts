import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import { caseSafeId } from '../../../integrations/crm/salesforce-id.js'
import { classifyFailure } from '../../../lib/errors.js'
import { orderWorkId } from '../../../lib/request-log.js'
import { SpanKind, inSpan } from '../../../lib/tracing.js'
import type { ReconciliationTask } from './reconciliation.js'
import type { OrderStore } from './store.js'
import type { CrmStatusRecorded, CrmStatusSeen, PendingOrderStore } from './pending-orders.js'
import { CrmStatusRounds, crmRoundsPart, type CrmRoundsReport } from './crm-rounds.js'
import { crmStatusRoundsKey } from '../redis-keys.js'

/** Orders asked about in one round: one SOQL query, its URL well within the REST API's limit. */
export const CRM_STATUS_BATCH = 200

const PENDING_REVIEW = 'Pending Review'
const ACTIVATED = 'Activated'

/** Where a CRM order's Status leaves a portal order still in `Pending Review`. */
export type CrmVerdict = 'awaiting_approval' | 'approved' | 'cancelled' | 'activated' | 'unknown'

/** The contract's reading of a CRM order's Status (undefined: the CRM has no such order). */
export function verdictOf (status: string | undefined, cancelledStatuses: ReadonlySet<string>): CrmVerdict {
  if (status === undefined) return 'unknown'
  if (status === PENDING_REVIEW) return 'awaiting_approval'
  if (status === ACTIVATED) return 'activated'
  return cancelledStatuses.has(status) ? 'cancelled' : 'approved'
}

export interface CrmStatusOptions {
  orders: Pick<OrderStore, 'markProvisioningRequested' | 'placementLink'>
  pending: Pick<PendingOrderStore, 'dueForCrmStatus' | 'recordCrmStatuses'>
  /** The Status of each of these CRM orders the CRM has, by 18-character id: one API call. */
  crmStatuses: (crmOrderIds: string[]) => Promise<Map<string, string>>
  /** Queues the order's provisioning job, whose id is the CRM order id's: never a second one. */
  provision: (crmOrderId: string) => Promise<void>
  /** Cancels the portal order and its billing order; null when it had moved on. */
  cancel: (orderId: string, reason: string) => Promise<unknown>
  /** CRM_ORDER_CANCELLED_STATUSES */
  cancelledStatuses: readonly string[]
  /** Each round's outcome: it asked the CRM (or had nothing to ask), or could not. */
  rounds: Pick<CrmStatusRounds, 'asked' | 'failedToAsk'>
  /** The round found orders the CRM approved that no platform event brought (after provisioning them). */
  approvedNotReceived: (count: number) => Promise<void>
  log: FastifyBaseLogger
  logFor: (correlationId: string) => FastifyBaseLogger
}

/**
 * The reconciliation's task that asks the CRM where the portal's orders in `Pending Review` stand,
 * up to CRM_STATUS_BATCH a round in one query: still in `Pending Review`, they await approval;
 * approved (any other Status but `Activated` and the cancelled ones), their platform event did not
 * come, and they are provisioned through the same job the event would have queued; cancelled or
 * rejected, the portal order and its billing order are cancelled. What the CRM said is stored in
 * PostgreSQL, so that every instance measures the same. A failure of the CRM or PostgreSQL ends the
 * round with nothing decided; the next round asks again.
 */
export class CrmStatusReconciliation implements ReconciliationTask {
  readonly name = 'crm-status'
  readonly #cancelled: ReadonlySet<string>
  #approvedNotReceived = 0

  constructor (private readonly options: CrmStatusOptions) {
    this.#cancelled = new Set(options.cancelledStatuses)
  }

  /** Orders found approved that no platform event brought, since start (this instance's rounds). */
  get approvedNotReceived (): number {
    return this.#approvedNotReceived
  }

  async run (signal: AbortSignal): Promise<void> {
    const { pending, crmStatuses, rounds } = this.options
    const due = await pending.dueForCrmStatus(CRM_STATUS_BATCH)
    // Nothing to ask is not blind: the run of failed rounds ends as when the CRM answers.
    const statuses = due.length === 0
      ? new Map<string, string>()
      : await crmStatuses(due.map((order) => order.crmOrderId)).catch(async (error: unknown) => {
        await rounds.failedToAsk(error)
        throw error
      })
    await rounds.asked()
    if (due.length > 0) await this.#judge(due, statuses, signal)
  }

  async #judge (
    due: Array<{ id: string, crmOrderId: string }>,
    statuses: Map<string, string>,
    signal: AbortSignal
  ): Promise<void> {
    const { pending, log } = this.options
    const seen: CrmStatusSeen[] = due.map(({ id, crmOrderId }) => {
      const status = statuses.get(caseSafeId(crmOrderId))
      return { id, crmStatus: status ?? null, approved: verdictOf(status, this.#cancelled) === 'approved' }
    })
    const recorded = await pending.recordCrmStatuses(seen)
    const byVerdict = (verdict: CrmVerdict) =>
      recorded.filter((order) => verdictOf(order.crmStatus ?? undefined, this.#cancelled) === verdict)
    const approved = byVerdict('approved')
    const cancelled = byVerdict('cancelled')
    log.debug(
      {
        asked: due.length,
        awaitingApproval: byVerdict('awaiting_approval').length,
        approved: approved.length,
        cancelled: cancelled.length
      },
      'CRM status of the orders in Pending Review read'
    )
    this.#warnOfStrays(byVerdict('activated'), byVerdict('unknown'))
    for (const order of approved) {
      if (signal.aborted) return
      await this.#provision(order)
    }
    if (approved.length > 0) await this.options.approvedNotReceived(approved.length)
    for (const order of cancelled) {
      if (signal.aborted) return
      await this.#cancel(order)
    }
  }

  /**
   * Queued, then marked as handed to the job queue (as an event's hand-off marks it): should the
   * queue not take it, the next round finds it again. Counted and said once, when first found.
   */
  async #provision (order: CrmStatusRecorded): Promise<void> {
    const { crmOrderId, id, crmStatus, newlyApproved } = order
    if (newlyApproved) {
      this.#approvedNotReceived++
      this.options.logFor(orderWorkId(crmOrderId)).warn({ orderId: id, crmOrderId, crmStatus },
        'the CRM approved an order whose platform event has not arrived: provisioning it from the reconciliation')
    }
    // A hand-off as an event's is: its own trace, linked to the order's placement.
    const placement = await this.options.orders.placementLink(crmOrderId)
    await inSpan('reconciliation hand-off', {
      kind: SpanKind.INTERNAL,
      root: true,
      links: placement === undefined ? [] : [placement],
      attributes: { 'crm.order_id': crmOrderId, 'order.id': id }
    }, async () => {
      await this.options.provision(crmOrderId)
      await this.options.orders.markProvisioningRequested(crmOrderId)
    })
  }

  async #cancel ({ id, crmOrderId, crmStatus }: CrmStatusRecorded): Promise<void> {
    const log = this.options.logFor(orderWorkId(crmOrderId))
    try {
      const order = await this.options.cancel(id, `crm_${crmStatus ?? ''}: the CRM order's Status is ${crmStatus ?? ''}`)
      if (order !== null) {
        log.warn(
          { orderId: id, crmOrderId, crmStatus },
          'the CRM cancelled an order in Pending Review: cancelled here, with its billing order'
        )
      }
    } catch (error) {
      // Cancelled here already; its billing order is the recovery's once the claim runs out.
      log.warn(
        { orderId: id, crmOrderId, crmStatus, failure: classifyFailure(error) },
        'the billing order of an order the CRM cancelled could not be cancelled yet; the recovery tries again'
      )
    }
  }

  /** CRM orders that neither wait, go on nor stop: said once each, for an operator to look at. */
  #warnOfStrays (activated: CrmStatusRecorded[], unknown: CrmStatusRecorded[]): void {
    const { logFor } = this.options
    for (const { id, crmOrderId, statusChanged } of activated) {
      if (statusChanged) {
        logFor(orderWorkId(crmOrderId)).warn(
          { orderId: id, crmOrderId },
          'the CRM says Activated an order that was never provisioned here: it stays in Pending Review; check it in the CRM'
        )
      }
    }
    for (const { id, crmOrderId, statusChanged } of unknown) {
      if (statusChanged) {
        logFor(orderWorkId(crmOrderId)).warn(
          { orderId: id, crmOrderId },
          'the CRM has no order with this id: the order stays in Pending Review; check it in the CRM'
        )
      }
    }
  }
}

// Registered in the orders feature scope (portalApi in app.ts), beside the reconciliation it joins.
declare module 'fastify' {
  interface FastifyInstance {
    /** The reconciliation's task that judges the orders in Pending Review by the CRM's word. */
    orderCrmStatus: CrmStatusReconciliation
  }
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    /** The run of reconciliation rounds that could not ask the CRM, as every instance sees it. */
    crmStatusRounds: CrmRoundsReport
  }
}

/**
 * Adds the CRM status task to the orders' reconciliation: it provisions through the job queue, and
 * asks the platform-event subscription to subscribe again when the CRM approved orders that a
 * connected subscription did not deliver, at most once a warning period across every instance.
 */
async function orderCrmStatus (fastify: FastifyInstance) {
  const { config, upstreams: { crm }, orderPlacement, log } = fastify
  const eventSubscription = fastify.platformEvents.subscription
  const { store: orders, pending: pendingOrders, jobs } = fastify.orders
  const rounds = new CrmStatusRounds({ redis: fastify.redis, key: crmStatusRoundsKey(config.REDIS_KEY_PREFIX), log })
  const task = new CrmStatusReconciliation({
    rounds,
    orders,
    pending: pendingOrders,
    crmStatuses: (crmOrderIds) => crm.queue.run((deadline) => crm.client.getOrderStatuses(crmOrderIds, deadline)),
    provision: (crmOrderId) => jobs.enqueue(crmOrderId),
    cancel: (orderId, reason) => orderPlacement.cancel(orderId, reason),
    cancelledStatuses: config.crmOrderCancelledStatuses,
    approvedNotReceived: async () => {
      // Redis away: the subscription is down anyway, and subscribes from the stored position when it is back.
      await eventSubscription.requestResubscribe(config.ORDERS_PENDING_WARNING_S * 1000)
        .catch((error: unknown) => log.warn(
          { failure: classifyFailure(error) },
          'the platform-event subscription could not be asked to subscribe again'
        ))
    },
    log,
    logFor: fastify.logFor
  })
  fastify.orderReconciliation.add(task)
  fastify.decorate('orderCrmStatus', task)
  fastify.metrics.live('portal_bff_orders_approved_not_received_total',
    'Orders the reconciliation found approved in the CRM while no platform event had brought them, and provisioned (this instance\'s rounds)',
    'counter', async () => [{ value: task.approvedNotReceived }])
  fastify.metrics.live('portal_bff_reconciliation_crm_failed_rounds_total',
    'Rounds of the order reconciliation that could not ask the CRM the Status of the orders in Pending Review (an error, a timeout, a refused query; this instance\'s rounds)',
    'counter', async () => [{ value: rounds.failed }])
  fastify.monitoring.register('crmStatusRounds', crmRoundsPart(rounds))
}

export default fp(orderCrmStatus, {
  name: 'order-crm-status',
  fastify: '5.x',
  dependencies: ['orders', 'order-placement', 'platform-events', 'upstreams', 'monitoring'],
  decorators: { fastify: ['config'] }
})

import type { FastifyBaseLogger } from 'fastify'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import type { CrmOrder } from '../../../integrations/crm/client.js'
import { caseSafeId } from '../../../integrations/crm/salesforce-id.js'
import type { Deadline } from '../../../lib/deadline.js'
import { runInContext } from '../../../lib/request-context.js'
import { orderWorkId } from '../../../lib/request-log.js'
import { SpanKind, inSpan, type Span } from '../../../lib/tracing.js'
import type { Order, OrderStore } from '../orders/store.js'
import { HandOffRefused, isBillingOrderConflict, type ParkedEvent, type ParkedEvents } from './parked-events.js'

export interface OrderHandOffOptions {
  channel: string
  orders: OrderStore
  crm: { getOrder (id: string, deadline: Deadline): Promise<CrmOrder | null> }
  crmQueue: { run<T> (task: (deadline: Deadline) => Promise<T>): Promise<T> }
  jobQueue: { enqueue (crmOrderId: string): Promise<void> }
  parked: ParkedEvents
  log: FastifyBaseLogger
  logFor: (correlationId: string) => FastifyBaseLogger
}

/** What an operator's retry of a parked event came to. */
export type RetryOutcome =
  | { handedOff: true, order: Order }
  | { handedOff: false, parked: ParkedEvent }

/** OpenTelemetry's messaging attributes of a hand-off: a platform event of Salesforce's, processed. */
const EVENT_MESSAGING = { 'messaging.system': 'salesforce', 'messaging.operation.type': 'process' } as const

function numberOrNull (value: unknown): number | null {
  const number = Number(value)
  return value !== null && value !== undefined && value !== '' && Number.isInteger(number) ? number : null
}

/**
 * Hands a platform event's order to the job queue: the order found or stored, marked, its job
 * queued. A hand-off that fails for a reason a retry does not change parks the event (the
 * subscription moves on); any other failure rejects, and the batch comes again.
 */
export class OrderHandOff {
  constructor (private readonly options: OrderHandOffOptions) {}

  /** The event's order is stored and its job queued, or the event parked, before it counts as received. */
  async handOff (event: PlatformEventMessage): Promise<void> {
    const crmOrderId = event.data.payload.OrderId__c
    const { replayId } = event.data.event
    const named = typeof crmOrderId === 'string' && crmOrderId !== ''
    await this.#inSpan(event.channel, replayId, named ? crmOrderId : undefined, async (span) => {
      if (!named) {
        this.options.log.warn({ replayId }, 'OrderProvisionRequested__e without an OrderId__c: skipped')
        return
      }
      // The hand-off's lines, and its CRM read, carry the order's id, as its provisioning's do.
      const correlationId = orderWorkId(caseSafeId(crmOrderId))
      await runInContext({ correlationId, log: this.options.logFor(correlationId) }, async () => {
        try {
          const order = await this.#provision(crmOrderId, replayId)
          span?.setAttributes({
            'order.id': order.id,
            ...(order.billingOrderId !== null && { 'billing.order_id': order.billingOrderId })
          })
        } catch (error) {
          if (!(error instanceof HandOffRefused)) throw error
          const parked = await this.options.parked.park(this.options.channel, caseSafeId(crmOrderId), event, error)
          this.options.log.error({ replayId, crmOrderId, reason: error.reason, parkedEventId: parked.id },
            `platform event parked, the subscription moves on: ${error.message}. Mend the data, then retry it (POST /health/events/parked/${parked.id}/retry)`)
        }
      })
    })
  }

  /**
   * An operator's retry of a parked event, once the data is mended: handed off (and no longer
   * parked), or parked still with the reason found now; null when no such event is parked. A
   * passing failure (PostgreSQL, Redis, the CRM) rejects and leaves it parked as it was.
   */
  async retry (id: string): Promise<RetryOutcome | null> {
    const { parked, log, logFor } = this.options
    const event = await parked.find(id)
    if (event === null) return null
    const correlationId = orderWorkId(caseSafeId(event.crmOrderId))
    return await this.#inSpan(
      event.channel,
      event.replayId,
      event.crmOrderId,
      async () => await runInContext({ correlationId, log: logFor(correlationId) }, async () => {
        try {
          const order = await this.#provision(event.crmOrderId, event.replayId)
          await parked.remove(id)
          log.info({ parkedEventId: id, crmOrderId: event.crmOrderId }, 'parked platform event retried: handed off')
          return { handedOff: true, order }
        } catch (error) {
          if (!(error instanceof HandOffRefused)) throw error
          const still = await parked.retryRefused(id, error)
          log.warn({ parkedEventId: id, crmOrderId: event.crmOrderId, reason: error.reason }, `parked platform event retried, still refused: ${error.message}`)
          return still === null ? null : { handedOff: false, parked: still }
        }
      }))
  }

  /** A hand-off's span: a trace of its own, linked to the order's placement, whose sampling decision it follows. */
  async #inSpan<T> (
    channel: string,
    replayId: number,
    crmOrderId: string | undefined,
    work: (span: Span | undefined) => Promise<T>
  ): Promise<T> {
    const placement = crmOrderId === undefined ? undefined : await this.options.orders.placementLink(crmOrderId)
    return await inSpan('platform event hand-off', {
      kind: SpanKind.CONSUMER,
      root: true,
      links: placement === undefined ? [] : [placement],
      attributes: {
        ...EVENT_MESSAGING,
        'messaging.destination.name': channel,
        'messaging.message.id': String(replayId),
        ...(crmOrderId !== undefined && { 'crm.order_id': crmOrderId })
      }
    }, work)
  }

  async #provision (crmOrderId: string, replayId: number): Promise<Order> {
    const order = await this.#requestProvisioning(crmOrderId)
    // The stored id, not the event's form of it: one job per order, whichever form events carry.
    const storedId = order.crmOrderId ?? crmOrderId
    await this.options.jobQueue.enqueue(storedId)
    this.options.log.info(
      {
        replayId,
        crmOrderId: storedId,
        ...(storedId === crmOrderId ? {} : { eventOrderId: crmOrderId }),
        orderId: order.id
      },
      'provisioning requested'
    )
    return order
  }

  /**
   * The order an event names, marked as handed to the job queue: stored already, or read from the
   * CRM and stored now under the id the CRM gives it. An event may carry the 15-character form of
   * an id the REST API gave in 18. Marked in the statement that finds or stores it, before the job
   * is queued: should Redis lose the job, the order is known to be waiting for one.
   */
  async #requestProvisioning (crmOrderId: string): Promise<Order> {
    const { orders, crm, crmQueue, parked } = this.options
    const caseSafe = caseSafeId(crmOrderId)
    const stored =
      (await orders.markProvisioningRequested(crmOrderId)) ??
      (caseSafe === crmOrderId ? null : await orders.markProvisioningRequested(caseSafe))
    if (stored !== null) return stored
    const record = await crmQueue.run((deadline) => crm.getOrder(crmOrderId, deadline))
    if (record === null) throw new HandOffRefused('order_unknown', `the CRM does not have order ${crmOrderId}`)
    const billingOrderId = numberOrNull(record.BillingOrderId__c)
    if (billingOrderId === null) throw new HandOffRefused('order_incomplete', `CRM order ${record.Id} carries no billing order (BillingOrderId__c)`)
    let order: Order
    try {
      order = await orders.ensure({
        crmOrderId: record.Id,
        billingClientId: numberOrNull(record.BillingClientId__c),
        billingOrderId,
        productId: String(record.Product__c ?? ''),
        billingCycle: null
      }, { provisioningRequested: true })
    } catch (error) {
      if (!isBillingOrderConflict(error)) throw error
      throw new HandOffRefused('billing_order_conflict', `CRM order ${record.Id} carries billing order ${billingOrderId}, which another order has`)
    }
    // Whatever was parked for it before the data was mended is done with. Asked only while some
    // are parked (a count reused for a second): most hand-offs cost no statement more.
    if (await parked.count() > 0) await parked.release(record.Id)
    return order
  }
}

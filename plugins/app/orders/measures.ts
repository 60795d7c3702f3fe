import type { MonitoringSource, PartMetric } from '../monitoring/index.js'
import type { Counted, PendingOrderStore, PendingOrders } from './pending-orders.js'
import type { PlacementStore } from './placement-store.js'

/**
 * A gauge of how many orders are in some state, and one of the oldest one's age (`_oldest_age_seconds`), read
 * from a part.
 */
function countAndAge<T> (
  name: string,
  help: string,
  ageHelp: string,
  counted: (part: T) => Counted
): Array<PartMetric<T>> {
  return [
    { name, help, type: 'gauge', samples: (part) => [{ value: counted(part).count }] },
    { name: `${name}_oldest_age_seconds`, help: ageHelp, type: 'gauge', samples: (part) => [{ value: Math.round(counted(part).oldestAgeSeconds ?? 0) }] }
  ]
}

/** The order placements neither finished nor undone. */
export function placementsPart (placements: Pick<PlacementStore, 'unfinished'>): MonitoringSource<Counted> {
  return {
    description: 'the orders store',
    read: () => placements.unfinished(),
    queriesDatabase: true,
    metrics: countAndAge(
      'portal_bff_order_placements_unfinished',
      'Order placements neither finished nor undone yet (the recovery finishes or undoes them; one with an Idempotency-Key waits for a retry first)',
      'Age of the oldest order placement neither finished nor undone; 0 when none',
      (unfinished) => unfinished
    )
  }
}

/** The portal orders in `Pending Review`: those the CRM approved are judged, those awaiting approval only counted. */
export function ordersPendingPart (pendingOrders: Pick<PendingOrderStore, 'count'>): MonitoringSource<PendingOrders> {
  return {
    description: 'the orders store',
    read: () => pendingOrders.count(),
    queriesDatabase: true,
    measures: {
      orders_pending_age: ({ approvedNotReceived: { count, oldestAgeSeconds } }) => ({
        value: oldestAgeSeconds ?? 0,
        ...(count === 0 && { note: 'no order the CRM approved waits in Pending Review' })
      })
    },
    metrics: [
      ...countAndAge(
        'portal_bff_orders_pending',
        'Orders the CRM approved (as the reconciliation last read their Status) still in Pending Review: their platform event did not come, and their provisioning has not started',
        'Seconds since the reconciliation found the oldest of those orders approved; 0 when none waits',
        (pending: PendingOrders) => pending.approvedNotReceived
      ),
      ...countAndAge(
        'portal_bff_orders_awaiting_approval',
        'Portal orders in Pending Review whose CRM order awaits approval (its Status still Pending Review); never judged',
        'Age of the oldest portal order awaiting approval in the CRM; 0 when none does',
        (pending: PendingOrders) => pending.awaitingApproval
      ),
      ...countAndAge(
        'portal_bff_orders_crm_status_unknown',
        'Portal orders in Pending Review whose CRM Status the reconciliation has not read yet (not asked yet, or the CRM did not answer)',
        'Age of the oldest portal order whose CRM Status is unknown; 0 when none is',
        (pending: PendingOrders) => pending.unknown
      )
    ]
  }
}

import type { FastifyBaseLogger } from 'fastify'
import { classifyFailure } from '../../../lib/errors.js'
import type { IdempotencyKeys } from './idempotency.js'
import type { OrderPlacement } from './placement.js'
import type { PlacementStore } from './placement-store.js'
import type { ReconciliationTask } from './reconciliation.js'

// Placements taken at a time: a round after an outage works through the backlog batch by batch.
const BATCH = 20

export interface PlacementRecoveryOptions {
  placements: PlacementStore
  placement: OrderPlacement
  log: FastifyBaseLogger
}

/**
 * Finishes or undoes every placement whose claim has run out: its request ended (a crash, a
 * database that stalled, an upstream that did not answer) before the last step. One that fails
 * again keeps its new claim, so it is tried once a round.
 */
export function placementRecovery ({ placements, placement, log }: PlacementRecoveryOptions): ReconciliationTask {
  return {
    name: 'order-placements',
    async run (signal) {
      while (!signal.aborted) {
        const batch = await placements.claimUnfinished(BATCH, placement.claimMs)
        for (const unfinished of batch) {
          // Those not reached keep their claim: another instance takes them once it runs out.
          if (signal.aborted) return
          try {
            await placement.resume(unfinished)
          } catch (error) {
            log.warn({ orderId: unfinished.order.id, placement: unfinished.step, failure: classifyFailure(error) },
              'an interrupted order placement could not be finished or undone yet; the next round tries again')
          }
        }
        if (batch.length < BATCH) return
      }
    }
  }
}

/** Forgets Idempotency-Keys past their time. */
export function expiredIdempotencyKeys (keys: IdempotencyKeys): ReconciliationTask {
  return { name: 'idempotency-keys', run: async () => { await keys.removeExpired() } }
}

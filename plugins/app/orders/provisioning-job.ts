/** The provisioning job of one order: its queue, its id and data, the work id of its lines, its lock. */
export const PROVISIONING_QUEUE = 'provisioning'

/**
 * OpenTelemetry's messaging attributes of the job's spans: BullMQ is the messaging system, the queue its destination.
 */
export const JOB_MESSAGING = { 'messaging.system': 'bullmq', 'messaging.destination.name': PROVISIONING_QUEUE } as const

export interface ProvisioningJob {
  crmOrderId: string
  /** The W3C traceparent of the span that queued the job (its producer span, under the hand-off), while tracing. */
  traceparent?: string
}

/** The job id derives from the CRM order id, so a replayed or duplicated event never makes a second job. */
export function jobIdOf (crmOrderId: string): string {
  return `order-${crmOrderId}`
}

/**
 * The worker's lock and stalled-job check for a PROVISIONING_LOCK_MS (decision 0092). BullMQ renews
 * the locks of the jobs it runs on a timer, here about a quarter of a lock apart, whatever a job is
 * doing: a step may outlast the lock (a CRM call takes up to CRM_QUEUE_TIMEOUT_MS), and what the lock
 * bounds is how late a renewal may be, three quarters of it (an event loop blocked, Redis not
 * answering). Were one later, another instance would run the job again, which repeats no step's
 * effect (telecom idempotency key, AcceptOrder reconciled, the CRM PATCH sets the same status). A dead
 * instance's job is free once its lock expires, and taken at the next stalled check. Checks are one
 * script for every instance together, spaced by a key that lives one interval (so checking often is
 * cheap): the job runs again within a lock and a half. A job whose worker died with it twice is
 * failed (maxStalledCount 1, BullMQ's default): an order that kills its worker each time stops there.
 */
export function lockOptions (lockMs: number): {
  lockDuration: number
  lockRenewTime: number
  stalledInterval: number
  maxStalledCount: number
} {
  const quarter = Math.floor(lockMs / 4)
  return { lockDuration: lockMs, lockRenewTime: quarter, stalledInterval: quarter, maxStalledCount: 1 }
}

import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { StringEnum } from './string-enum.js'

const Count = (description: string) => Type.Integer({ minimum: 0, description })

export const QueueHealth = StringEnum(['healthy', 'degraded', 'unhealthy'], {
  $id: 'QueueHealth',
  description: '`healthy`; `degraded` past a warning threshold; `unhealthy` past a critical one'
})

export const AlertLevel = StringEnum(['ok', 'warning', 'critical'], { $id: 'AlertLevel' })

export const QueueMetrics = Type.Object({
  totalRequests: Count('requests seen (cumulative)'),
  completedRequests: Count('requests completed (cumulative)'),
  failedRequests: Count('requests failed (cumulative)'),
  queueSize: Count('requests waiting in the queue'),
  pendingRequests: Count('requests in flight'),
  averageWaitTime: Count('average time waiting in the queue, ms, over the recent window'),
  averageExecutionTime: Count('average execution time, ms, over the recent window')
}, { $id: 'QueueMetrics', additionalProperties: false })

export const DailyUsage = Type.Object({
  used: Count('CRM API calls today'),
  limit: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
    description: 'daily CRM API quota; null only while neither the CRM nor CRM_DAILY_API_LIMIT has given one'
  })
}, { $id: 'DailyUsage', additionalProperties: false })
export type DailyUsage = Static<typeof DailyUsage>

export const QueueReport = Type.Object({
  health: Type.Ref(QueueHealth),
  metrics: Type.Ref(QueueMetrics)
}, { $id: 'QueueReport', additionalProperties: false })

export const CrmQueueReport = Type.Object({
  health: Type.Ref(QueueHealth),
  metrics: Type.Ref(QueueMetrics),
  dailyUsage: Type.Ref(DailyUsage)
}, { $id: 'CrmQueueReport', additionalProperties: false })

export const JobQueueReport = Type.Union([
  Type.Object({
    health: Type.Ref(QueueHealth),
    waiting: Count('jobs waiting to run'),
    active: Count('jobs running'),
    delayed: Count('jobs waiting for a retry'),
    failed: Count('jobs that failed after their last attempt, kept 30 days'),
    completed: Count('jobs completed, kept 7 days'),
    recentFailed: Count(
      'jobs that failed after their last attempt within the recent window (QUEUE_HEALTH_WINDOW_MS), which health is judged on'
    )
  }, { additionalProperties: false }),
  Type.Null({ description: 'Redis could not be asked' })
], { $id: 'JobQueueReport', description: 'the provisioning job queue (BullMQ)' })

const SubscriptionState = StringEnum(['disabled', 'standby', 'connecting', 'connected', 'failed'])

export const SubscriptionHealth = StringEnum(['healthy', 'degraded', 'unhealthy', 'disabled'], {
  $id: 'SubscriptionHealth',
  description: 'judged on the lease holder\'s report: `unhealthy` while no instance holds a connected subscription; `degraded` while the CRM did not grant the replay extension; `disabled` while CRM_EVENTS_ENABLED is not `true` (no event is received, so no order is provisioned)'
})

export const EventsReport = Type.Object({
  health: Type.Ref(SubscriptionHealth),
  state: SubscriptionState,
  lastEventAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  replayId: Type.Union([Type.Integer(), Type.Null()], { description: 'last event handed to the job queue' }),
  received: Count('events handed to the job queue'),
  reconnects: Count('handshakes after the first'),
  dropped: Count('events the CRM delivered without a replayId or a payload, skipped'),
  replayFallbacks: Count(
    'times the CRM no longer retained the stored replay position, so the subscription fell back to the fallback position; events of the gap may be lost'
  ),
  parked: Type.Union([Count('events'), Type.Null()], {
    description: 'events set aside because their hand-off failed for good (a data conflict, an incomplete or unknown order), shared by every instance; GET /health/events/parked lists them. null when the database does not answer'
  }),
  replaySupported: Type.Union([Type.Boolean(), Type.Null()], {
    description: 'whether the CRM\'s last handshake granted the replay extension; false: degraded, events published while disconnected are lost; null before a handshake'
  }),
  lastError: Type.Union([Type.String(), Type.Null()], {
    description: 'short failure code (of the last failure, or of the last event dropped)'
  }),
  holder: Type.Union([
    Type.Object({
      heldHere: Type.Boolean({
        description: 'whether this instance holds the lease (which one does is not told to anonymous callers)'
      }),
      state: SubscriptionState,
      lastEventAt: Type.Union([Type.String(), Type.Null()]),
      replayId: Type.Union([Type.Integer(), Type.Null()]),
      reportedAt: Type.String({ format: 'date-time' })
    }),
    Type.Null()
  ], { description: 'the instance holding the subscription lease, as it last reported; null when none does' })
}, {
  $id: 'EventsReport',
  description: 'the platform-event subscription: this instance\'s state, and the lease holder\'s'
})

const WaitingOrders = (description: string, agedFrom: string) => Type.Object({
  count: Count('orders'),
  oldestAgeMs: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], { description: `how long the oldest has waited, from ${agedFrom}; null when none waits` })
}, { additionalProperties: false, description })

export const OrdersReport = Type.Union([
  Type.Object({
    awaitingApproval: WaitingOrders(
      'their CRM order\'s Status still Pending Review: waiting on someone in the CRM, never judged',
      'when placed'
    ),
    approvedNotReceived: WaitingOrders(
      'approved in the CRM while no platform event brought them, their provisioning not started yet: what orders_pending_age judges',
      'when the reconciliation found them approved'
    ),
    unknown: WaitingOrders(
      'the CRM has not told their Status yet (not asked yet, or its status query failed: reconciliation_crm_failed_rounds judges that): neither awaiting approval nor approved as far as the service knows',
      'when placed'
    )
  }, { additionalProperties: false }),
  Type.Null({ description: 'the database could not be asked' })
], {
  $id: 'OrdersReport',
  description: 'the portal orders in Pending Review, by the CRM\'s word as the reconciliation ' +
    '(every ORDERS_RECONCILE_INTERVAL_S) last read it; shared by every instance'
})

/**
 * Orders in some state, and how long the oldest has been in it (seconds; null when none is), as the orders
 * store counts them.
 */
interface Counted { count: number, oldestAgeSeconds: number | null }

/** The orders waiting, as the reports give them: ages in whole milliseconds. */
export function pendingOrdersReport ({
  awaitingApproval,
  approvedNotReceived,
  unknown
}: Record<'awaitingApproval' | 'approvedNotReceived' | 'unknown', Counted>) {
  const report = ({ count, oldestAgeSeconds }: Counted) => ({
    count,
    oldestAgeMs: oldestAgeSeconds === null ? null : Math.round(oldestAgeSeconds * 1000)
  })
  return {
    awaitingApproval: report(awaitingApproval),
    approvedNotReceived: report(approvedNotReceived),
    unknown: report(unknown)
  }
}

/**
 * The queue health report of a service with these request queues (by their upstreams' names, in
 * the registry's order): each queue's report, `QueueReport` unless `reports` names another.
 */
export function queuesReport (queues: readonly string[], reports: Readonly<Record<string, TSchema>> = {}) {
  return Type.Object({
    timestamp: Type.String({ format: 'date-time' }),
    ...Object.fromEntries(queues.map((name) => [name, Type.Ref(reports[name] ?? QueueReport)])),
    jobs: Type.Ref(JobQueueReport),
    events: Type.Ref(EventsReport),
    orders: Type.Ref(OrdersReport)
  }, { $id: 'QueuesReport', title: 'Queue health report', additionalProperties: false })
}

const QueueDetailProperties = {
  name: Type.String(),
  timestamp: Type.String({ format: 'date-time' }),
  health: Type.Ref(QueueHealth),
  level: Type.Ref(AlertLevel),
  metrics: Type.Ref(QueueMetrics),
  recentFailedRequests: Count('failed requests within the recent window, which health is judged on'),
  settings: Type.Object({
    concurrency: Type.Integer(),
    timeoutMs: Type.Integer({ description: 'deadline of one request, waiting included' }),
    maxSize: Type.Integer({ description: 'requests that may wait; one more is answered 503 at once' }),
    windowMs: Type.Integer({ description: 'window of the averages and of recentFailedRequests' })
  }, { additionalProperties: false }),
  thresholds: Type.Object({
    queueSize: Type.Object({ warning: Type.Number(), critical: Type.Number() }),
    failedRequests: Type.Object({ warning: Type.Number(), critical: Type.Number() })
  }, { additionalProperties: false })
}

export const QueueDetail = Type.Object(QueueDetailProperties, {
  $id: 'QueueDetail',
  title: 'Queue details',
  additionalProperties: false
})

export const CrmQueueDetail = Type.Object({
  ...QueueDetailProperties,
  dailyUsage: Type.Object({
    used: Count('CRM API calls today'),
    limit: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
    percent: Type.Union([Type.Number(), Type.Null()], { description: 'used against limit' }),
    limitSource: StringEnum(['crm', 'configured', 'unknown']),
    level: Type.Ref(AlertLevel)
  }, { additionalProperties: false })
}, { $id: 'CrmQueueDetail', title: 'CRM queue details', additionalProperties: false })

/** The shared shapes of the queue reports; the report of them all (`queuesReport`) is made from the registry. */
export const queueSchemas = [
  QueueHealth,
  AlertLevel,
  QueueMetrics,
  DailyUsage,
  QueueReport,
  CrmQueueReport,
  JobQueueReport,
  SubscriptionHealth,
  EventsReport,
  OrdersReport,
  QueueDetail,
  CrmQueueDetail
]

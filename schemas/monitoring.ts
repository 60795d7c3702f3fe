import { Type, type Static } from '@sinclair/typebox'
import { AlertLevel, OrdersReport, QueueHealth, QueueMetrics } from './queues.js'
import { StringEnum } from './string-enum.js'

const Count = (description: string) => Type.Integer({ minimum: 0, description })
const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T, description?: string) =>
  Type.Union([schema, Type.Null()], description === undefined ? {} : { description })

/**
 * An alert of a row of the thresholds table with these measures: the rows the monitoring plugin
 * holds (plugins/app/monitoring/thresholds.ts), which the routes pass in.
 */
const alertOf = (measures: readonly string[]) => Type.Object({
  measure: StringEnum(measures, { description: 'the row of the thresholds table (specification §8)' }),
  description: Type.String(),
  value: Nullable(Type.Number(), 'the current value in `unit`; null when there is nothing to judge (see `note`)'),
  unit: StringEnum(['failing checks', 'requests', 'jobs', 'percent', 'ms', 'seconds', 'rounds']),
  level: Type.Ref(AlertLevel),
  threshold: Type.Object({
    comparison: StringEnum(['above', 'below'], {
      description: 'a value past a limit in this direction crosses it; a value at the limit does not'
    }),
    warning: Type.Number(),
    critical: Type.Number()
  }, { additionalProperties: false }),
  crossed: Type.Union([Type.Literal('warning'), Type.Literal('critical'), Type.Null()], {
    description: 'the threshold the value is past, if any'
  }),
  priority: Type.Union([StringEnum(['P1', 'P2', 'P3', 'P4']), Type.Null()], {
    description: 'the incident priority the level routes to: P1 and P2 page on-call, P3 and P4 open a ticket; null when ok'
  }),
  note: Type.Optional(Type.String())
}, { $id: 'Alert', additionalProperties: false })

// What the reports refer to by `Alert`: its shape, whichever measures the registered one lists.
const Alert = alertOf([])
export type Alert = Static<typeof Alert>

const Priority = Type.Object({
  respondWithinMinutes: Type.Integer(),
  postIncidentReviewWithinBusinessDays: Nullable(Type.Integer())
}, { additionalProperties: false })

export const AlertsReport = Type.Object({
  timestamp: Type.String({ format: 'date-time' }),
  level: Type.Ref(AlertLevel, { description: 'the worst level of the alerts' }),
  alerts: Type.Array(Type.Ref(Alert), { description: 'one per row of the thresholds table, in its order' }),
  priorities: Type.Object(
    { P1: Priority, P2: Priority, P3: Priority, P4: Priority },
    { additionalProperties: false, description: 'incident response times (specification §8)' }
  )
}, { $id: 'AlertsReport', title: 'Alerts report', additionalProperties: false })

const QueueStatus = {
  health: Type.Ref(QueueHealth),
  metrics: Type.Ref(QueueMetrics),
  recentFailedRequests: Count('failed requests within the recent window')
}

export const StatusSummary = Type.Object({
  timestamp: Type.String({ format: 'date-time' }),
  level: Type.Ref(AlertLevel),
  core: Type.Object({
    status: StringEnum(['ok', 'degraded']),
    checks: Type.Object({
      database: StringEnum(['ok', 'fail']),
      cache: StringEnum(['ok', 'fail'])
    }, { additionalProperties: false })
  }, { additionalProperties: false }),
  billing: Nullable(
    Type.Object(QueueStatus, { additionalProperties: false }),
    'the billing request queue; null when there is no data'
  ),
  crm: Nullable(Type.Object({
    ...QueueStatus,
    dailyUsage: Type.Object({
      used: Count('CRM API calls today'),
      limit: Nullable(Type.Integer({ minimum: 0 })),
      percent: Nullable(Type.Number()),
      limitSource: Type.String()
    }, { additionalProperties: false })
  }, { additionalProperties: false }), 'the CRM request queue and the daily API usage; null when there is no data'),
  jobs: Nullable(Type.Object({
    waiting: Count('waiting'),
    active: Count('running'),
    delayed: Count('waiting for a retry'),
    failed: Count('failed, kept 30 days'),
    completed: Count('completed'),
    recentFailed: Count('failed within the recent window, which health is judged on')
  }, { additionalProperties: false }), 'the provisioning job queue; null when there is no data'),
  orders: Type.Ref(OrdersReport),
  subscriber: Nullable(Type.Object({
    state: Type.String(),
    lastEventAt: Nullable(Type.String({ format: 'date-time' })),
    replayId: Type.Union([Type.Integer(), Type.String(), Type.Null()]),
    received: Count('events received'),
    reconnects: Count('reconnections'),
    dropped: Count('events delivered without a replayId or a payload, skipped'),
    replayFallbacks: Count('times the stored replay position was no longer retained, so events of the gap may be lost'),
    parked: Nullable(
      Count('events'),
      'events set aside because their hand-off failed for good, awaiting an operator; null when the database does not answer'
    ),
    replaySupported: Nullable(Type.Boolean(), 'whether the CRM granted the replay extension; false: degraded'),
    lastError: Nullable(Type.String())
  }, { additionalProperties: false }), 'the platform-event subscription; null when there is no data'),
  streams: Nullable(Type.Object({
    open: Count('open /api/events streams of this instance'),
    refused: Type.Object({
      user_limit: Count('refused: the user held SSE_MAX_STREAMS_PER_USER'),
      instance_limit: Count('refused: the instance held SSE_MAX_STREAMS')
    }, { additionalProperties: false })
  }, { additionalProperties: false }), 'this instance\'s SSE streams; null when there is no data'),
  blacklist: Nullable(Type.Object({
    mode: StringEnum(['fail-closed', 'fail-open'], {
      description: 'what token checks do while Redis is down (AUTH_BLACKLIST_FAIL_CLOSED)'
    }),
    available: Type.Boolean({ description: 'whether the last blacklist command reached Redis' }),
    failOpenDecisions: Count('token checks let through unverified while Redis was down, since start')
  }, { additionalProperties: false }), 'the token blacklist; null when there is no data'),
  alerts: Type.Array(Type.Ref(Alert))
}, { $id: 'StatusSummary', title: 'Status page summary', additionalProperties: false })

/** The schemas of the alerts' routes, their alerts of these measures. */
export const alertSchemas = (measures: readonly string[]) => [
  AlertLevel,
  QueueHealth,
  QueueMetrics,
  OrdersReport,
  alertOf(measures),
  AlertsReport,
  StatusSummary
]

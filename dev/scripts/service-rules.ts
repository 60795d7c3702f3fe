import type { Priority } from '../../plugins/app/monitoring/threshold-row.js'

/**
 * The alerting rules of the service itself, beside the thresholds table's: a dead or frozen
 * instance, no instance at all, the platform-event subscription (the specification's incident:
 * events stop and orders wait in Pending Review), the events parked for an operator, and the time
 * from an event to its order Active.
 * Each has a runbook, docs/runbooks/<measure>.md, and promtool cases rendered into
 * deploy/monitoring/prometheus/alerts.test.yml.
 */

export type Severity = 'warning' | 'critical'

/** A series of a promtool case; the target's labels (job, instance) are added unless `labels` names them. */
export interface CaseSeries { metric: string, labels?: Record<string, string>, values: string }

export interface ServiceRuleCase {
  name: string
  series: CaseSeries[]
  /** The rules of this alert name that fire at the evaluation time, by severity. */
  fires: Severity[]
  /** The labels of the alert when they are not the target's (an alert over every instance has only `job`). */
  alertLabels?: Record<string, string>
}

export interface ServiceRule {
  alert: string
  /** Its runbook (docs/runbooks/<measure>.md) and its `measure` label. */
  measure: string
  severity: Severity
  priority: Priority
  expr: string
  summary: string
  description: string
}

const JOB = 'job="portal-bff"'
const HOLDER = 'portal_bff_event_subscription_holder_state'
const LAG = 'portal_bff_order_provisioning_lag_seconds'
const LAG_WINDOW = '15m'
const LAG_BUCKETS = ['0.5', '1', '2.5', '5', '10', '30', '60', '120', '300', '600', '900', '1800', '3600', '+Inf']

const lagP95 = `histogram_quantile(0.95, rate(${LAG}_bucket{${JOB}}[${LAG_WINDOW}]))`

/** The instances whose subscription is enabled: a disabled one has no holder to judge. */
function enabledOnly (selector: string): string {
  return `(${selector} unless on (job, instance) ${HOLDER}{${JOB},state="disabled"} == 1)`
}

export const SERVICE_RULES: readonly ServiceRule[] = [
  {
    alert: 'PortalBffNoInstanceUp',
    measure: 'no_instance_up',
    severity: 'critical',
    priority: 'P1',
    expr: `sum by (job) (up{${JOB}}) == 0 or absent(up{${JOB}})`,
    summary: 'No Portal BFF instance answers, or none is scraped at all',
    description: 'Every instance fails its scrape, or Prometheus has no Portal BFF target left (a deployment scaled to zero, or service discovery that lost them): the portal is down.'
  },
  {
    alert: 'PortalBffInstanceDown',
    measure: 'instance_down',
    severity: 'critical',
    priority: 'P1',
    expr: `up{${JOB}} == 0`,
    summary: 'A Portal BFF instance does not answer its scrape',
    description: 'Prometheus could not scrape /metrics of this instance: the process is dead, frozen or unreachable, or the scrape timed out. The instance\'s other alerts are silenced while this one fires; it does not start while no instance answers at all (PortalBffNoInstanceUp says it).'
  },
  {
    alert: 'PortalBffEventSubscriptionNoHolder',
    measure: 'event_subscription_no_holder',
    severity: 'critical',
    priority: 'P2',
    expr: `min by (job) (${enabledOnly(`${HOLDER}{${JOB},state="none"}`)}) == 1`,
    summary: 'No instance holds the platform-event subscription',
    description: 'Every instance with CRM_EVENTS_ENABLED sees the subscription lease free for longer than a takeover takes (CRM_EVENTS_LEASE_TTL_MS and a renewal period): nobody is subscribed, and new orders wait in Pending Review.'
  },
  {
    alert: 'PortalBffEventSubscriptionNotConnected',
    measure: 'event_subscription_not_connected',
    severity: 'critical',
    priority: 'P2',
    expr: `(max by (job) (${enabledOnly(`${HOLDER}{${JOB},state="connected"}`)}) == 0 unless on (job) min by (job) (${enabledOnly(`${HOLDER}{${JOB},state="none"}`)}) == 1) or absent(${HOLDER}{${JOB}})`,
    summary: 'The platform-event subscription is not known to be connected',
    description: 'An instance holds the subscription lease but its stream is connecting or failing (the CRM refuses the handshake, its token, or is unreachable), or its state is stale or unknown (the holder stopped reporting, or Redis cannot be read), or no instance exports it: no event is known to arrive, and new orders wait in Pending Review.'
  },
  {
    alert: 'PortalBffEventReplayFellBack',
    measure: 'event_replay_fell_back',
    severity: 'warning',
    priority: 'P3',
    expr: `increase(portal_bff_event_subscriber_replay_fallbacks_total{${JOB}}[1h]) > 0`,
    summary: 'The CRM no longer retained the subscription\'s stored replay position',
    description: 'Within the last hour the subscription subscribed from its fallback position (CRM_EVENTS_REPLAY) because the CRM no longer had the stored one: events published in the gap may never have been delivered, and their orders wait in Pending Review.'
  },
  {
    alert: 'PortalBffEventReplayUnsupported',
    measure: 'event_replay_unsupported',
    severity: 'warning',
    priority: 'P3',
    expr: `portal_bff_event_subscriber_replay_supported{${JOB}} == 0`,
    summary: 'The CRM did not grant the replay extension: the subscription is degraded',
    description: 'The last handshake came back without the replay extension, so the CRM will not replay events published while the subscription is disconnected: a reconnection or a takeover loses them. GET /health/queues says events.health degraded.'
  },
  {
    alert: 'PortalBffEventsParked',
    measure: 'events_parked',
    severity: 'warning',
    priority: 'P3',
    expr: `max by (job) (portal_bff_events_parked{${JOB}}) > 0`,
    summary: 'Platform events are parked: their orders wait for an operator',
    description: 'An event\'s hand-off failed for a reason a retry does not change (its CRM order carries a billing order another order has, carries none, or the CRM does not have it), so it was set aside and the subscription moved on. Its order is not provisioned until the data is mended and the event retried (GET /health/events/parked lists them).'
  },
  {
    alert: 'PortalBffProvisioningLag',
    measure: 'provisioning_lag',
    severity: 'warning',
    priority: 'P4',
    expr: `${lagP95} > 60`,
    summary: 'Orders take over a minute from their platform event to Active (95th percentile over 15 minutes)',
    description: 'Provisioning is slow: upstream steps are being retried (telecom activation, billing AcceptOrder, the CRM status) or jobs wait for a worker. Thresholds: warning above 60 s, critical above 900 s.'
  },
  {
    alert: 'PortalBffProvisioningLag',
    measure: 'provisioning_lag',
    severity: 'critical',
    priority: 'P2',
    expr: `${lagP95} > 900`,
    summary: 'Orders take over 15 minutes from their platform event to Active (95th percentile over 15 minutes)',
    description: 'Provisioning is stalled: customers wait for their service. Thresholds: warning above 60 s, critical above 900 s.'
  }
]

const constant = (value: number) => `${value}+0x20`

/** Lag observations, 10 a minute, all in the bucket whose upper bound is `le`. */
function lagSeries (le: string): CaseSeries[] {
  const at = Number(le)
  return LAG_BUCKETS.map((bucket) => ({
    metric: `${LAG}_bucket`,
    labels: { le: bucket },
    values: `0+${(bucket === '+Inf' ? Infinity : Number(bucket)) >= at ? 10 : 0}x20`
  }))
}

const secondInstance = { instance: 'portal-bff-2:3000' }
const holder = (state: string, value: number, labels: Record<string, string> = {}): CaseSeries => ({ metric: HOLDER, labels: { state, ...labels }, values: constant(value) })

/** promtool cases of each alert name of SERVICE_RULES. */
export const SERVICE_RULE_CASES: Readonly<Record<string, readonly ServiceRuleCase[]>> = {
  PortalBffInstanceDown: [
    { name: 'its scrapes fail, another instance answers: it fires', series: [{ metric: 'up', values: constant(0) }, { metric: 'up', labels: secondInstance, values: constant(1) }], fires: ['critical'] },
    { name: 'the only instance fails its scrapes: PortalBffNoInstanceUp pages, this one does not start', series: [{ metric: 'up', values: constant(0) }], fires: [] },
    { name: 'scrapes succeed: nothing fires', series: [{ metric: 'up', values: constant(1) }], fires: [] }
  ],
  PortalBffNoInstanceUp: [
    {
      name: 'both instances fail their scrapes: it fires once, for the job',
      series: [{ metric: 'up', values: constant(0) }, { metric: 'up', labels: secondInstance, values: constant(0) }],
      fires: ['critical'],
      alertLabels: { job: 'portal-bff' }
    },
    { name: 'no target is scraped at all: it fires', series: [{ metric: 'up', labels: { job: 'another-service' }, values: constant(1) }], fires: ['critical'], alertLabels: { job: 'portal-bff' } },
    { name: 'one of two instances answers: nothing fires', series: [{ metric: 'up', values: constant(1) }, { metric: 'up', labels: secondInstance, values: constant(0) }], fires: [] }
  ],
  PortalBffEventSubscriptionNoHolder: [
    { name: 'every instance sees no holder: it fires', series: [holder('none', 1), holder('none', 1, secondInstance)], fires: ['critical'], alertLabels: { job: 'portal-bff' } },
    { name: 'one instance already sees the new holder: nothing fires', series: [holder('none', 1), holder('none', 0, secondInstance)], fires: [] },
    {
      name: 'the enabled instance sees no holder, the other has events disabled: it fires',
      series: [holder('none', 1), holder('disabled', 0), holder('none', 0, secondInstance), holder('disabled', 1, secondInstance)],
      fires: ['critical'],
      alertLabels: { job: 'portal-bff' }
    },
    { name: 'events disabled everywhere: no holder to judge, nothing fires', series: [holder('none', 0), holder('disabled', 1), holder('none', 0, secondInstance), holder('disabled', 1, secondInstance)], fires: [] }
  ],
  PortalBffEventSubscriptionNotConnected: [
    { name: 'the holder is failing: it fires', series: [holder('none', 0), holder('connected', 0), holder('failed', 1)], fires: ['critical'], alertLabels: { job: 'portal-bff' } },
    { name: 'the holder is connected: nothing fires', series: [holder('none', 0), holder('connected', 1)], fires: [] },
    { name: 'no holder at all: the no-holder alert says it, not this one', series: [holder('none', 1), holder('connected', 0)], fires: [] },
    { name: 'the holder stopped reporting (stale): it fires', series: [holder('none', 0), holder('connected', 0), holder('stale', 1)], fires: ['critical'], alertLabels: { job: 'portal-bff' } },
    { name: 'no instance exports the holder state: it fires', series: [{ metric: 'up', values: constant(1) }], fires: ['critical'], alertLabels: { job: 'portal-bff' } },
    { name: 'events disabled everywhere: nothing fires', series: [holder('none', 0), holder('connected', 0), holder('disabled', 1)], fires: [] },
    { name: 'the enabled instance sees it connected, the other has events disabled: nothing fires', series: [holder('connected', 1), holder('disabled', 0), holder('connected', 0, secondInstance), holder('disabled', 1, secondInstance)], fires: [] }
  ],
  PortalBffEventReplayFellBack: [
    { name: 'the subscription fell back once: it fires', series: [{ metric: 'portal_bff_event_subscriber_replay_fallbacks_total', values: '0+0x5 1+0x14' }], fires: ['warning'] },
    { name: 'it never fell back: nothing fires', series: [{ metric: 'portal_bff_event_subscriber_replay_fallbacks_total', values: constant(0) }], fires: [] }
  ],
  PortalBffEventReplayUnsupported: [
    { name: 'no replay extension: it fires', series: [{ metric: 'portal_bff_event_subscriber_replay_supported', values: constant(0) }], fires: ['warning'] },
    { name: 'replay granted: nothing fires', series: [{ metric: 'portal_bff_event_subscriber_replay_supported', values: constant(1) }], fires: [] }
  ],
  PortalBffEventsParked: [
    { name: 'an event is parked: it fires once, for the job', series: [{ metric: 'portal_bff_events_parked', values: constant(1) }, { metric: 'portal_bff_events_parked', labels: secondInstance, values: constant(1) }], fires: ['warning'], alertLabels: { job: 'portal-bff' } },
    { name: 'nothing parked: nothing fires', series: [{ metric: 'portal_bff_events_parked', values: constant(0) }], fires: [] }
  ],
  PortalBffProvisioningLag: [
    { name: 'orders take up to 10 s: nothing fires', series: lagSeries('10'), fires: [] },
    { name: 'orders take up to 2 minutes: the warning fires', series: lagSeries('120'), fires: ['warning'] },
    { name: 'orders take up to 30 minutes: warning and critical fire', series: lagSeries('1800'), fires: ['warning', 'critical'] }
  ]
}

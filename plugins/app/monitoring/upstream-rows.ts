/**
 * The rows of the thresholds table that an upstream's descriptor gives limits for: its request
 * queue's two, and its response time's when it is judged alone. The registry holds the limits;
 * what the rows measure and how Prometheus reads it is the same for every upstream.
 */
import type { UpstreamDescriptor, UpstreamLimits } from '../../../integrations/descriptor.js'
import type { Threshold } from './threshold-row.js'

/** What the rows are made of: an upstream's descriptor. */
export type RowSource = Pick<UpstreamDescriptor, 'name' | 'title' | 'description' | 'queue' | 'responseTime'>

/** The measures of an upstream's request queue: `billing_queue_size`, `billing_failed_requests`. */
export function queueMeasures<Name extends string> (name: Name) {
  return { queueSize: `${name}_queue_size`, failedRequests: `${name}_failed_requests` } as const
}

/** The measure of an upstream's response time judged alone: `telecom_response_time`. */
export function responseTimeMeasure<Name extends string> (name: Name): `${Name}_response_time` {
  return `${name}_response_time`
}

const limitsOf = ({ warning, critical, priority }: UpstreamLimits) => ({ warning, critical, priority: { ...priority } })

/** The rows of each request queue of the registry, upstream by upstream. */
export function queueRows (upstreams: readonly RowSource[]): Threshold[] {
  return upstreams.flatMap(({ name, title, queue }): Threshold[] => {
    if (queue === undefined) return []
    const measures = queueMeasures(name)
    const match = { queue: name }
    return [
      {
        measure: measures.queueSize,
        description: `${title} request queue: requests waiting`,
        unit: 'requests',
        comparison: 'above',
        ...limitsOf(queue.limits.queueSize),
        dependency: name,
        prometheus: { kind: 'gauge', metric: 'portal_bff_queue_size', match, without: ['queue'] }
      },
      {
        measure: measures.failedRequests,
        description: `${title} request queue: failed requests in the recent window`,
        unit: 'requests',
        comparison: 'above',
        ...limitsOf(queue.limits.failedRequests),
        dependency: name,
        prometheus: {
          kind: 'gauge',
          metric: 'portal_bff_queue_recent_failed_requests',
          match,
          without: ['queue'],
          recent: { counter: 'portal_bff_queue_requests_failed_total', match, without: ['queue'] }
        }
      }
    ]
  })
}

/** The response-time row of each upstream of the registry that gives its limits. */
export function responseTimeRows (upstreams: readonly RowSource[]): Threshold[] {
  return upstreams.flatMap(({ name, description, responseTime }): Threshold[] => responseTime === undefined
    ? []
    : [{
        measure: responseTimeMeasure(name),
        description: `${description} response time, 95th percentile over 5 minutes`,
        unit: 'ms',
        comparison: 'above',
        ...limitsOf(responseTime),
        dependency: name,
        minSamples: 10,
        prometheus: {
          kind: 'quantile',
          histogram: 'portal_bff_upstream_request_duration_seconds',
          match: { upstream: name },
          without: ['outcome', 'upstream']
        }
      }])
}

import { Type } from '@sinclair/typebox'
import { FAILURE_KINDS } from '../lib/errors.js'
import { StringEnum } from './string-enum.js'

const NullableNumber = (description: string) => Type.Union([Type.Number(), Type.Null()], { description })

export const ServicesCacheReport = Type.Object({
  status: StringEnum(['ok', 'fail'], {
    description: '`fail` while Redis cannot be read: reads then go to the upstreams'
  }),
  hits: Type.Integer({ minimum: 0 }),
  misses: Type.Integer({ minimum: 0 }),
  errors: Type.Integer({ minimum: 0, description: 'cache commands that failed (each read counted as a miss)' }),
  hitRate: NullableNumber(
    'percent of reads served from the cache, this instance, since start; null before the first read'
  ),
  latency: Type.Object({
    averageMs: NullableNumber('average cache command latency over the last 1000 commands'),
    p95Ms: NullableNumber('95th percentile of the same')
  }, { additionalProperties: false }),
  memory: Type.Object({
    usedBytes: Type.Union([Type.Integer(), Type.Null()]),
    maxBytes: Type.Union([Type.Integer(), Type.Null()], {
      description: 'Redis maxmemory; null when Redis has no limit'
    }),
    percent: NullableNumber('used against maxmemory; null when there is no limit')
  }, { additionalProperties: false }),
  keys: Type.Union([Type.Integer(), Type.Null()], { description: 'keys in the Redis database' }),
  ttlSeconds: Type.Record(Type.String(), Type.Integer(), { description: 'time to live of each kind of cached read' })
}, { $id: 'ServicesCacheReport', title: 'Services cache report', additionalProperties: false })

export const IntegrationCheck = Type.Object({
  status: StringEnum(['ok', 'fail']),
  latencyMs: Type.Integer({ minimum: 0 }),
  error: Type.Optional(StringEnum(FAILURE_KINDS, { description: 'short failure class, never raw text' }))
}, { $id: 'IntegrationCheck', additionalProperties: false })

export const EventsCheck = Type.Object({
  status: StringEnum(['ok', 'fail', 'disabled'], {
    description: '`fail` while no instance holds a connected platform-event subscription; `disabled` while CRM_EVENTS_ENABLED is not `true`, which fails nothing but receives no event'
  }),
  latencyMs: Type.Integer({ minimum: 0 }),
  error: Type.Optional(StringEnum(FAILURE_KINDS, { description: 'short failure class, never raw text' }))
}, { $id: 'EventsCheck', additionalProperties: false })

/**
 * The integration health report of a service with these upstreams: a check each, between the database's and
 * the subscription's.
 */
export function integrationHealthReport (upstreams: readonly string[]) {
  return Type.Object({
    status: StringEnum(['ok', 'degraded']),
    timestamp: Type.String({ format: 'date-time' }),
    checks: Type.Object({
      database: Type.Ref(IntegrationCheck),
      ...Object.fromEntries(upstreams.map((name) => [name, Type.Ref(IntegrationCheck)])),
      events: Type.Ref(EventsCheck, { description: 'the platform-event subscription' })
    }, { additionalProperties: false })
  }, { $id: 'IntegrationHealthReport', title: 'Integration health report', additionalProperties: false })
}

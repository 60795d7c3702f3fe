import { Type } from '@sinclair/typebox'
import { pageQueryProperties } from './paging.js'
import { StringEnum } from './string-enum.js'

export const ParkReason = StringEnum(['billing_order_conflict', 'order_incomplete', 'order_unknown'], {
  $id: 'ParkReason',
  description: '`billing_order_conflict`: the CRM order carries a billing order (BillingOrderId__c) another order has; `order_incomplete`: it carries none; `order_unknown`: the CRM does not have the order'
})

export const ParkedEvent = Type.Object({
  id: Type.String({ pattern: '^[0-9]+$', description: 'the id to retry or discard it by' }),
  channel: Type.String({ description: 'e.g. /event/OrderProvisionRequested__e' }),
  replayId: Type.Integer(),
  crmOrderId: Type.String({ description: 'the CRM order the event names' }),
  reason: Type.Ref(ParkReason),
  detail: Type.String({ description: 'what was found, in words' }),
  parkedAt: Type.String({ format: 'date-time', description: 'when it was (last) parked' }),
  retries: Type.Integer({ minimum: 0, description: 'operator retries refused again' }),
  retriedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
    description: 'the last retry refused again; null before one'
  }),
  event: Type.Object({
    channel: Type.String(),
    data: Type.Object({
      schema: Type.String(),
      payload: Type.Record(Type.String(), Type.Unknown(), {
        description: 'as the CRM delivered it: OrderId__c, CreatedDate, CreatedById'
      }),
      event: Type.Object({ replayId: Type.Integer(), EventUuid: Type.Optional(Type.String()) })
    })
  }, { description: 'the event as delivered' })
}, { $id: 'ParkedEvent', additionalProperties: false })

export const ParkedEventList = Type.Object({
  events: Type.Array(Type.Ref(ParkedEvent), { description: 'the oldest first' }),
  page: Type.Integer(),
  limit: Type.Integer(),
  total: Type.Integer({ description: 'events parked, on every page' })
}, { $id: 'ParkedEventList', additionalProperties: false })

export const ParkedEventParams = Type.Object(
  { id: Type.String({ pattern: '^[0-9]{1,18}$' }) },
  { additionalProperties: false }
)

export const ParkedEventQuery = Type.Object(pageQueryProperties, { additionalProperties: false })

export const ParkedEventRetried = Type.Object({
  crmOrderId: Type.String({ description: 'the order as stored' }),
  orderId: Type.String({ format: 'uuid', description: 'the portal\'s order' }),
  status: Type.String({
    description: 'the order\'s status now; its provisioning job is queued (once: the job id is the CRM order id)'
  })
}, { $id: 'ParkedEventRetried', additionalProperties: false })

export const parkedEventSchemas = [ParkReason, ParkedEvent, ParkedEventList, ParkedEventRetried]

import AjvCompiler from '@fastify/ajv-compiler'
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { ORDER_STATUSES } from './orders.js'
import { StringEnum } from './string-enum.js'

/**
 * The frames of the SSE stream (`GET /api/events`), each as its `event:` name and the JSON of its
 * `data:`. The status change is written to the client's backlog and announced in Redis in this
 * shape, checked on the way in and read back through it; the API document publishes the schemas,
 * under the names `…Event` the Server-Sent Events standard gives a frame: the browser reads them.
 */
export const OrderStatusEvent = Type.Object({
  orderId: Type.String({ format: 'uuid', description: 'the portal order' }),
  crmOrderId: Type.Union([Type.String({ minLength: 1 }), Type.Null()], {
    description: 'the CRM order, null until the CRM has it'
  }),
  status: StringEnum(ORDER_STATUSES, {
    description: 'the status it moved to: `Cancelled` when the company cancelled or rejected the order in its CRM (nothing is billed)'
  }),
  failureReason: Type.Union([Type.String(), Type.Null()], {
    description: 'why its provisioning failed, when `Failed`'
  }),
  at: Type.String({ format: 'date-time', description: 'when it moved' })
}, {
  $id: 'OrderStatusEvent',
  additionalProperties: false,
  description: '`order.status`: one of the caller\'s orders changed status. It has an `id:`, from which `Last-Event-ID` resumes'
})
export type OrderStatusEvent = Static<typeof OrderStatusEvent>

export const SessionEndedEvent = Type.Object({
  reason: StringEnum(['logged_out', 'expired'], {
    description: '`logged_out`: a logout here, in another tab or everywhere, or a new sign-in in this browser; `expired`: unused too long, at its maximum age, or lost by the service'
  })
}, {
  $id: 'SessionEndedEvent',
  additionalProperties: false,
  description: '`session.ended`: the token or session of the stream ended; the stream\'s last event'
})

export const ShutdownEvent = Type.Object({
  reason: StringEnum(['shutdown'])
}, {
  $id: 'ShutdownEvent',
  additionalProperties: false,
  description: '`shutdown`: the instance is stopping; the stream\'s last event. Reconnect: another instance answers'
})

/** Each frame of the stream, by its `event:` name. */
export const SSE_FRAMES = {
  'order.status': OrderStatusEvent,
  'session.ended': SessionEndedEvent,
  shutdown: ShutdownEvent
} as const satisfies Record<string, TSchema>

export type SseFrameName = keyof typeof SSE_FRAMES

/** One frame as the stream sends it: `id:` (order.status only), `event:` and `data:` lines. */
export const SseEvent = Type.Unsafe({
  $id: 'SseEvent',
  description: 'One event of the stream, sent as an `id:` line (`order.status` only), an `event:` line naming it and a `data:` line of JSON',
  oneOf: Object.entries(SSE_FRAMES).map(([name, data]) => ({
    type: 'object',
    properties: {
      ...(name === 'order.status' && {
        id: { type: 'string', pattern: '^[0-9]+-[0-9]+$', description: 'the backlog entry id (`<ms>-<seq>`)' }
      }),
      event: { type: 'string', enum: [name] },
      data: { $ref: `${String(data.$id)}#` }
    },
    required: [...(name === 'order.status' ? ['id'] : []), 'event', 'data'],
    additionalProperties: false
  }))
})

export const sseEventSchemas = [...Object.values(SSE_FRAMES), SseEvent]

const compile = AjvCompiler()(
  {},
  { customOptions: { allErrors: true, coerceTypes: false, removeAdditional: false, useDefaults: false }, plugins: [] }
)
const validators = Object.fromEntries(Object.entries(SSE_FRAMES).map(([name, schema]) => [
  name,
  compile({ schema, method: 'POST', url: `/sse-events/${name}`, httpPart: 'body' })
])) as Record<SseFrameName, ReturnType<typeof compile>>

/**
 * What in `data` breaks the schema of the frame `name`, one line each (`/status must be equal to one of the
 * allowed values`); none when it holds.
 */
export function sseFrameProblems (name: SseFrameName, data: unknown): string[] {
  const validate = validators[name]
  if (validate(data) === true) return []
  const errors =
    (validate as { errors?: Array<{ instancePath: string, message?: string, params?: Record<string, unknown> }> })
      .errors ?? []
  return errors.map(({ instancePath, message, params }) => {
    const extra = params?.additionalProperty ?? params?.allowedValues
    return `${instancePath === '' ? '(the event)' : instancePath} ${message ?? 'is invalid'}${extra === undefined ? '' : ` (${JSON.stringify(extra)})`}`
  })
}

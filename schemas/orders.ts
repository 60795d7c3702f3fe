import { Type } from '@sinclair/typebox'
import { pageQueryProperties } from './paging.js'
import { StringEnum } from './string-enum.js'

/**
 * An order's life: the specification names `Pending Review`, where orders wait for the CRM's approval
 * and its platform event; `Cancelled` when the CRM cancels or rejects it instead.
 */
export const ORDER_STATUSES = ['Pending Review', 'Provisioning', 'Active', 'Failed', 'Cancelled'] as const

export const BILLING_CYCLES = ['monthly', 'quarterly', 'semiannually', 'annually', 'biennially', 'triennially'] as const

export const OrderStatus = StringEnum(ORDER_STATUSES, {
  $id: 'OrderStatus',
  description: '`Pending Review` → `Provisioning` → `Active`, or `Failed` after its retries; `Cancelled` from `Pending Review` when the CRM cancels or rejects the order (its billing order is cancelled too)'
})

const orderExample = {
  id: '3f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b',
  productId: '1',
  billingCycle: 'monthly',
  billingOrderId: 42,
  crmOrderId: '801000000000001AAA',
  status: 'Pending Review',
  failureReason: null,
  msisdn: null,
  createdAt: '2025-04-01T09:30:00.000Z',
  updatedAt: '2025-04-01T09:30:00.000Z'
}

export const Order = Type.Object({
  id: Type.String({ format: 'uuid' }),
  productId: Type.String(),
  billingCycle: Type.Union([Type.String(), Type.Null()]),
  billingOrderId: Type.Union([Type.Integer(), Type.Null()]),
  crmOrderId: Type.Union([Type.String(), Type.Null()]),
  status: Type.Ref(OrderStatus),
  failureReason: Type.Union([Type.String(), Type.Null()]),
  msisdn: Type.Union([Type.String(), Type.Null()], { description: 'the activated number, once provisioned' }),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' })
}, { $id: 'Order', additionalProperties: false, examples: [orderExample] })

export const NewOrderRequest = Type.Object({
  // A string of digits too: WHMCS, and this API's orders, give product ids as strings.
  productId: Type.Union(
    [Type.Integer({ minimum: 1, maximum: 999_999_999 }), Type.String({ pattern: '^[1-9][0-9]{0,8}$' })],
    {
      description: 'the billing product id (WHMCS `pid`): a number, or a string of digits as an order gives it back'
    }),
  billingCycle: StringEnum(BILLING_CYCLES)
}, { $id: 'NewOrderRequest', additionalProperties: false, examples: [{ productId: 1, billingCycle: 'monthly' }] })

export const NewOrderHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({
    // A structured-field string of printable ASCII (quoted, as the draft sends it, or bare), up to 255 characters.
    pattern: '^(?:"[ !#-\\[\\]-~]{1,255}"|[!#-~]{1,255})$',
    description: 'IETF draft "The Idempotency-Key HTTP Header Field": a unique value per order the client means to place, a UUID say, ' +
      'sent again with each retry of that order (after a 5xx, no answer, or 409). The same key from the same client completes the first placement ' +
      'or returns its answer, and never places a second billing order; a new order, or a retry after a 400 or 422, takes a new key'
  }))
})

// The plain form only: the uuid format also takes a `urn:uuid:` prefix, which PostgreSQL refuses.
const UUID = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'

export const OrderParams = Type.Object(
  { id: Type.String({ format: 'uuid', pattern: UUID }) },
  { additionalProperties: false }
)

export const OrderQuery = Type.Object(pageQueryProperties, { additionalProperties: false })

export const OrderList = Type.Object({
  orders: Type.Array(Type.Ref(Order)),
  page: Type.Integer(),
  limit: Type.Integer(),
  total: Type.Integer({ description: 'orders of the caller, on every page' })
}, {
  $id: 'OrderList',
  additionalProperties: false,
  examples: [{ orders: [orderExample], page: 1, limit: 25, total: 1 }]
})

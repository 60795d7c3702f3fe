import { Type } from '@sinclair/typebox'
import { StringEnum } from './string-enum.js'

/** An order's life: the specification names `Pending Review`, where orders wait for their platform event. */
export const ORDER_STATUSES = ['Pending Review', 'Provisioning', 'Active', 'Failed'] as const

export const BILLING_CYCLES = ['monthly', 'quarterly', 'semiannually', 'annually', 'biennially', 'triennially'] as const

export const OrderStatus = StringEnum(ORDER_STATUSES, {
  $id: 'OrderStatus',
  description: '`Pending Review` → `Provisioning` → `Active`, or `Failed` after its retries'
})

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
}, { $id: 'Order', additionalProperties: false })

export const NewOrderRequest = Type.Object({
  // A string of digits too: WHMCS, and this API's orders, give product ids as strings.
  productId: Type.Union([Type.Integer({ minimum: 1, maximum: 999_999_999 }), Type.String({ pattern: '^[1-9][0-9]{0,8}$' })], {
    description: 'the billing product id (WHMCS `pid`): a number, or a string of digits as an order gives it back'
  }),
  billingCycle: StringEnum(BILLING_CYCLES)
}, { additionalProperties: false })

// The plain form only: the uuid format also takes a `urn:uuid:` prefix, which PostgreSQL refuses.
const UUID = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'

export const OrderParams = Type.Object({ id: Type.String({ format: 'uuid', pattern: UUID }) }, { additionalProperties: false })

export const OrderQuery = Type.Object({
  page: Type.Integer({ minimum: 1, maximum: 10_000, default: 1 }),
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 25 })
}, { additionalProperties: false })

export const OrderList = Type.Object({
  orders: Type.Array(Type.Ref(Order)),
  page: Type.Integer(),
  limit: Type.Integer(),
  total: Type.Integer()
}, { $id: 'OrderList', additionalProperties: false })

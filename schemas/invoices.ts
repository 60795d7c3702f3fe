import { Type } from '@sinclair/typebox'
import { pageQueryProperties } from './paging.js'
import { StringEnum } from './string-enum.js'

const Money = Type.Number()
const Nullable = <T extends ReturnType<typeof Type.String>>(schema: T) => Type.Union([schema, Type.Null()])

const invoiceProperties = {
  id: Type.Integer(),
  invoiceNumber: Type.String(),
  date: Nullable(Type.String({ description: 'YYYY-MM-DD; null when the billing system has none (0000-00-00)' })),
  dueDate: Nullable(Type.String({ description: 'YYYY-MM-DD; null when the billing system has none (0000-00-00)' })),
  datePaid: Nullable(Type.String({ description: 'null while unpaid' })),
  subtotal: Money,
  credit: Money,
  tax: Money,
  total: Money,
  taxRate: Type.Number(),
  status: Type.String({ description: 'Paid, Unpaid, Cancelled, Refunded, Collections, Draft or Payment Pending' }),
  paymentMethod: Type.String(),
  currencyCode: Nullable(Type.String())
}

const invoiceExample = {
  id: 1004,
  invoiceNumber: '1004',
  date: '2025-04-01',
  dueDate: '2025-04-15',
  datePaid: null,
  subtotal: 10,
  credit: 0,
  tax: 2,
  total: 12,
  taxRate: 20,
  status: 'Unpaid',
  paymentMethod: 'banktransfer',
  currencyCode: 'GBP'
}

export const Invoice = Type.Object(invoiceProperties, {
  $id: 'Invoice',
  additionalProperties: false,
  examples: [invoiceExample]
})

export const InvoiceDetails = Type.Object({
  ...invoiceProperties,
  balance: Money,
  items: Type.Array(Type.Object({
    id: Type.Integer(),
    type: Type.String(),
    description: Type.String(),
    amount: Money,
    taxed: Type.Boolean()
  }, { additionalProperties: false }))
}, {
  $id: 'InvoiceDetails',
  additionalProperties: false,
  examples: [{
    ...invoiceExample,
    balance: 12,
    items: [
      { id: 10040, type: 'Hosting', description: 'Mobile 5 GB (01/04/2025 - 30/04/2025)', amount: 10, taxed: true }
    ]
  }]
})

export const InvoiceStatus = StringEnum([
  'Paid',
  'Unpaid',
  'Cancelled',
  'Refunded',
  'Collections',
  'Draft',
  'Payment Pending'
])

export const InvoiceQuery = Type.Object({
  status: Type.Optional(InvoiceStatus),
  ...pageQueryProperties
}, { additionalProperties: false })

export const InvoiceParams = Type.Object({
  id: Type.Integer({ minimum: 1, maximum: 2_147_483_647 })
}, { additionalProperties: false })

export const InvoiceList = Type.Object({
  invoices: Type.Array(Type.Ref(Invoice)),
  page: Type.Integer(),
  limit: Type.Integer(),
  total: Type.Integer({ description: 'invoices that match, on every page' })
}, {
  $id: 'InvoiceList',
  additionalProperties: false,
  examples: [{ invoices: [invoiceExample], page: 1, limit: 25, total: 1 }]
})

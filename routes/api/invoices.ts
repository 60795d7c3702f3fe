import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { InvoiceDetails as BillingInvoiceDetails } from '../../integrations/billing/mapping.js'
import { BillingUnavailableError, InvoiceNotFoundError, UpstreamFailure } from '../../lib/errors.js'
import {
  authenticatedErrorResponses, BILLING_UNAVAILABLE, errorResponse, invalidRequestResponse, TOKEN_CHECK_UNAVAILABLE
} from '../../schemas/error.js'
import { Invoice, InvoiceDetails, InvoiceList, InvoiceParams, InvoiceQuery } from '../../schemas/invoices.js'

const errors = {
  ...authenticatedErrorResponses,
  ...invalidRequestResponse,
  503: errorResponse(`${BILLING_UNAVAILABLE}; or ${TOKEN_CHECK_UNAVAILABLE}`)
}

/** Any billing failure, a full queue or a missed deadline included, is the same 503 to the portal. */
function billingUnavailable (error: unknown): never {
  throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
}

const invoiceRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [Invoice, InvoiceDetails, InvoiceList]) fastify.addSchema(schema)
  const { upstreams: { billing }, servicesCache } = fastify

  fastify.get('/api/invoices', {
    schema: {
      operationId: 'listInvoices',
      tags: ['invoices'],
      summary: 'The caller\'s invoices, newest first, a page at a time',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      querystring: InvoiceQuery,
      response: {
        200: Type.Ref(InvoiceList, { description: 'one page of the caller\'s invoices, with the total' }),
        ...errors
      }
    }
  }, async (request) => {
    const clientId = request.user.clientId
    const { status, page, limit } = request.query
    const key = `${clientId}:${status ?? 'any'}:${page}:${limit}`
    const result = await servicesCache.getOrLoad('invoices', key, () => billing.queue.run((deadline) =>
      billing.client.getInvoices({ clientId, status, limitStart: (page - 1) * limit, limitNum: limit }, deadline)
    )).catch(billingUnavailable)
    return { invoices: result.invoices, page, limit, total: result.total }
  })

  fastify.get('/api/invoices/:id', {
    schema: {
      operationId: 'getInvoice',
      tags: ['invoices'],
      summary: 'One of the caller\'s invoices, with its lines',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      params: InvoiceParams,
      response: {
        200: Type.Ref(InvoiceDetails, { description: 'the invoice' }),
        ...errors,
        404: errorResponse('The caller has no invoice with this id (`INVOICE_NOT_FOUND`)')
      }
    }
  }, async (request) => {
    const { id } = request.params
    const invoice = await servicesCache.getOrLoad<BillingInvoiceDetails | null>('invoice', String(id), () =>
      billing.queue.run((deadline) => billing.client.getInvoice(id, deadline))
    ).catch(billingUnavailable)
    // Another client's invoice is as absent as one that does not exist.
    if (invoice === null || invoice.clientId !== request.user.clientId) throw new InvoiceNotFoundError()
    if (invoice.currencyCode !== null) return invoice
    // WHMCS's GetInvoice names no currency (GetInvoices does): an invoice is in its client's.
    const client = await servicesCache.getOrLoad('client', String(invoice.clientId), () =>
      billing.queue.run((deadline) => billing.client.getClientsDetails(invoice.clientId, deadline))
    ).catch(billingUnavailable)
    return { ...invoice, currencyCode: client?.currencyCode ?? null }
  })
}

export default invoiceRoutes

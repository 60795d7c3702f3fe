import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { OrderRefusedError } from '../../integrations/billing/client.js'
import { BillingUnavailableError, CrmUnavailableError, OrderNotFoundError, OrderRejectedError } from '../../lib/errors.js'
import { classifyFailure, UpstreamFailure } from '../../lib/failure.js'
import { QueueFullError } from '../../lib/request-queue.js'
import { authenticatedErrorResponses, bodyErrorResponses, errorResponse, invalidRequestResponse, TOKEN_CHECK_UNAVAILABLE } from '../../schemas/error.js'
import { NewOrderRequest, Order, OrderList, OrderParams, OrderQuery, OrderStatus } from '../../schemas/orders.js'

const errors = { ...authenticatedErrorResponses, ...invalidRequestResponse, 503: errorResponse(TOKEN_CHECK_UNAVAILABLE) }

const orderRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [OrderStatus, Order, OrderList]) fastify.addSchema(schema)
  const { billing, billingQueue, crm, crmQueue, orders, orderEvents } = fastify
  const { CRM_ORDER_ACCOUNT_ID } = fastify.config

  fastify.post('/api/orders', {
    schema: {
      tags: ['orders'],
      summary: 'Order a product: billing AddOrder, then a CRM Order in Pending Review',
      description: 'The CRM provisions the order when it raises OrderProvisionRequested__e; follow its status on GET /api/events.',
      security: [{ bearerAuth: [] }],
      body: NewOrderRequest,
      response: {
        201: Type.Ref(Order, { description: 'ordered: the order, Pending Review' }),
        ...errors,
        ...bodyErrorResponses,
        422: errorResponse('The billing system refused the order: an unknown product, say (`ORDER_REJECTED`)'),
        503: errorResponse(`The billing system is unavailable, did not answer in time, or its request queue is full (\`BILLING_UNAVAILABLE\`: the service stored no order); the same of the CRM (\`CRM_UNAVAILABLE\`: the order is kept as Failed, with the reason); or ${TOKEN_CHECK_UNAVAILABLE}`)
      }
    }
  }, async (request, reply) => {
    const clientId = Number(request.user.sub)
    const { billingCycle } = request.body
    const productId = Number(request.body.productId)
    const placed = await billingQueue.run((deadline) => billing.addOrder({ clientId, productId, billingCycle }, deadline)).catch((error: unknown) => {
      // An error answer is the billing system refusing this order; anything else (an answer that cannot
      // be read included: the order may have been placed) is it being unavailable.
      if (error instanceof OrderRefusedError) throw new OrderRejectedError({ cause: error })
      throw error instanceof UpstreamFailure ? new BillingUnavailableError({ cause: error }) : error
    })
    const order = await orders.create({ billingClientId: clientId, productId: String(productId), billingCycle, billingOrderId: placed.orderId, crmOrderId: null })
    let crmOrderId: string
    try {
      crmOrderId = await crmQueue.run((deadline) => crm.createOrder({
        Name: `Portal order ${placed.orderId}`,
        Status: 'Pending Review',
        EffectiveDate: new Date().toISOString().slice(0, 10),
        BillingOrderId__c: String(placed.orderId),
        BillingClientId__c: String(clientId),
        Product__c: String(productId),
        ...(CRM_ORDER_ACCOUNT_ID === undefined ? {} : { AccountId: CRM_ORDER_ACCOUNT_ID })
      }, deadline))
    } catch (error) {
      // A full queue is this instance's overload, not an answer of the CRM: the reason says which.
      const cause = error instanceof QueueFullError ? 'queue_full' : classifyFailure(error)
      const failed = await orders.changeStatus(order.id, 'Failed', `crm_${cause}: the CRM order could not be created`)
      if (failed !== null) await orderEvents.publish(failed)
      throw error instanceof UpstreamFailure ? new CrmUnavailableError({ cause: error }) : error
    }
    const stored = await orders.setCrmOrderId(order.id, crmOrderId)
    await orderEvents.publish(stored)
    return reply.code(201).send(stored)
  })

  fastify.get('/api/orders', {
    schema: {
      tags: ['orders'],
      summary: 'The caller\'s orders, newest first',
      security: [{ bearerAuth: [] }],
      querystring: OrderQuery,
      response: { 200: Type.Ref(OrderList, { description: 'one page of the caller\'s orders, with the total' }), ...errors }
    }
  }, async (request) => {
    const { page, limit } = request.query
    const { orders: list, total } = await orders.listForClient(Number(request.user.sub), limit, (page - 1) * limit)
    return { orders: list, page, limit, total }
  })

  fastify.get('/api/orders/:id', {
    schema: {
      tags: ['orders'],
      summary: 'One of the caller\'s orders and its status',
      security: [{ bearerAuth: [] }],
      params: OrderParams,
      response: { 200: Type.Ref(Order, { description: 'the order' }), ...errors, 404: errorResponse('The caller has no order with this id (`ORDER_NOT_FOUND`)') }
    }
  }, async (request) => {
    const order = await orders.findForClient(Number(request.user.sub), request.params.id)
    if (order === null) throw new OrderNotFoundError()
    return order
  })
}

export default orderRoutes

import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { OrderNotFoundError } from '../../lib/errors.js'
import { authenticatedErrorResponses, bodyErrorResponses, unsafeAuthenticatedErrorResponses, errorResponse, invalidRequestResponse, TOKEN_CHECK_UNAVAILABLE } from '../../schemas/error.js'
import { NewOrderRequest, Order, OrderList, OrderParams, OrderQuery, OrderStatus } from '../../schemas/orders.js'

const errors = { ...authenticatedErrorResponses, ...invalidRequestResponse, 503: errorResponse(TOKEN_CHECK_UNAVAILABLE) }

const orderRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [NewOrderRequest, OrderStatus, Order, OrderList]) fastify.addSchema(schema)
  const { orders, orderPlacement } = fastify

  fastify.post('/api/orders', {
    schema: {
      operationId: 'placeOrder',
      tags: ['orders'],
      summary: 'Order a product: billing AddOrder, then a CRM Order in Pending Review',
      description: 'The CRM provisions the order when it raises OrderProvisionRequested__e; follow its status on GET /api/events.',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      body: Type.Ref(NewOrderRequest),
      response: {
        201: Type.Ref(Order, { description: 'ordered: the order, Pending Review' }),
        ...errors,
        ...bodyErrorResponses,
        403: unsafeAuthenticatedErrorResponses[403],
        422: errorResponse('The billing system refused the order: an unknown product, say (`ORDER_REJECTED`)'),
        503: errorResponse(`The billing system is unavailable, did not answer in time, or its request queue is full (\`BILLING_UNAVAILABLE\`: the service stored no order); the same of the CRM (\`CRM_UNAVAILABLE\`: the order is kept as Failed, with the reason); or ${TOKEN_CHECK_UNAVAILABLE}`)
      }
    }
  }, async (request, reply) => {
    const { productId, billingCycle } = request.body
    const order = await orderPlacement.place({ clientId: Number(request.user.sub), productId: Number(productId), billingCycle })
    return reply.code(201).send(order)
  })

  fastify.get('/api/orders', {
    schema: {
      operationId: 'listOrders',
      tags: ['orders'],
      summary: 'The caller\'s orders, newest first',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
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
      operationId: 'getOrder',
      tags: ['orders'],
      summary: 'One of the caller\'s orders and its status',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
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

import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import {
  IdempotencyKeyInUseError, IdempotencyKeyReusedError, OrderNotFoundError, OrderPlacementCancelledError,
  OrderRejectedError
} from '../../../lib/errors.js'
import { requestFingerprint } from './idempotency.js'
import { toNewPlacement } from './placement.js'
import type { OrderRequest } from './placement-upstreams.js'
import {
  authenticatedErrorResponses, bodyErrorResponses, unsafeAuthenticatedErrorResponses, errorResponse,
  invalidRequestResponse, TOKEN_CHECK_UNAVAILABLE, errorBody
} from '../../../schemas/error.js'
import {
  NewOrderRequest, NewOrderHeaders, Order, OrderList, OrderParams, OrderQuery, OrderStatus
} from '../../../schemas/orders.js'

const errors = {
  ...authenticatedErrorResponses,
  ...invalidRequestResponse,
  503: errorResponse(TOKEN_CHECK_UNAVAILABLE)
}

const orderRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of [NewOrderRequest, OrderStatus, Order, OrderList]) fastify.addSchema(schema)
  const { orderPlacement, orderIdempotencyKeys } = fastify
  const orders = fastify.orders.store

  fastify.post('/api/orders', {
    schema: {
      operationId: 'placeOrder',
      tags: ['orders'],
      summary: 'Order a product: billing AddOrder, then a CRM Order in Pending Review',
      description: 'The CRM provisions the order when it raises OrderProvisionRequested__e; follow its status on GET /api/events. ' +
        'Send an `Idempotency-Key` (IETF draft "The Idempotency-Key HTTP Header Field"), a new one per order: one key places at most one billing order, ever. ' +
        'Retry with the same key after a 5xx, after no answer, and after 409 once `retry-after` has passed: the retry completes the first placement ' +
        'where it stopped and answers as a first success (201 with the order and its CRM order). After any other 4xx (400, 422) send a new key. ' +
        'A placement that failed after billing took the order waits ORDERS_PLACEMENT_RESUME_S (15 minutes) from its last attempt for a retry, ' +
        'then is cancelled with its billing order and invoice, and its key answers 422 `ORDER_PLACEMENT_CANCELLED`. ' +
        'Without a key, a placement that fails completes or undoes itself: an order that does not go on has its billing order and invoice cancelled. ' +
        'Keys are kept for ORDERS_IDEMPOTENCY_KEY_TTL_S (a day).',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      headers: NewOrderHeaders,
      body: Type.Ref(NewOrderRequest),
      response: {
        201: Type.Ref(Order, {
          description: 'ordered: the order, Pending Review (or the first answer to this Idempotency-Key)'
        }),
        ...errors,
        ...bodyErrorResponses,
        403: unsafeAuthenticatedErrorResponses[403],
        409: errorResponse(
          'A request with this Idempotency-Key is still running, or an upstream has yet to show what an earlier attempt did ' +
          '(`IDEMPOTENCY_KEY_IN_USE`): retry with the same key after `retry-after` seconds'
        ),
        422: errorResponse(
          'The billing system refused the order: an unknown product, say (`ORDER_REJECTED`); ' +
          'this Idempotency-Key came with a different body (`IDEMPOTENCY_KEY_REUSED`); ' +
          'or the order of this key was not completed within ORDERS_PLACEMENT_RESUME_S and is cancelled ' +
          '(`ORDER_PLACEMENT_CANCELLED`). The same key answers the same: send a new one'
        ),
        503: errorResponse(
          'The billing system is unavailable, did not answer in time, or its request queue is full (`BILLING_UNAVAILABLE`); ' +
          'the order could not be completed now (`ORDER_INCOMPLETE`: a retry with the same Idempotency-Key completes it); ' +
          'without an Idempotency-Key, the CRM could not take the order ' +
          '(`ORDER_CANCELLED`: kept as Failed with the reason, its billing order and invoice cancelled); ' +
          `or ${TOKEN_CHECK_UNAVAILABLE}. Retry with the same Idempotency-Key: it never places a second order`
        )
      }
    }
  }, async (request, reply) => {
    const { productId, billingCycle } = request.body
    const clientId = request.user.clientId
    const order: OrderRequest = { clientId, productId: Number(productId), billingCycle }
    const header = request.headers['idempotency-key']
    if (header === undefined) return reply.code(201).send(await orderPlacement.place(order))

    // The draft's form is a structured-field string, quoted; a bare token is taken too.
    const key = header.replace(/^"(.*)"$/, '$1')
    const newPlacement = toNewPlacement(order)
    const reservation = await orderIdempotencyKeys.reserve(
      clientId,
      key,
      requestFingerprint(newPlacement),
      newPlacement,
      orderPlacement.claimMs,
      orderPlacement.keyed.leaseMs
    )
    const keep = (statusCode: number, body: unknown) => orderIdempotencyKeys.keepAnswer(clientId, key, statusCode, body)
      .catch(() => request.log.warn(
        { idempotencyKey: key },
        'the answer to an Idempotency-Key could not be kept; the key finds its order again'
      ))
    const inUse = (retryAfterSeconds: number) => {
      reply.header('retry-after', retryAfterSeconds)
      return new IdempotencyKeyInUseError()
    }
    switch (reservation.kind) {
      case 'mismatch': throw new IdempotencyKeyReusedError()
      case 'in_progress': throw inUse(reservation.retryAfterSeconds)
      case 'replay': return reply.code(reservation.statusCode).send(reservation.body)
      case 'cancelled': {
        const error = new OrderPlacementCancelledError()
        await keep(422, errorBody(request, 422, error.code, error.message))
        throw error
      }
      case 'placed':
        await keep(201, reservation.order)
        return reply.code(201).send(reservation.order)
    }
    try {
      const { placement, lease } = reservation
      const placed =
        reservation.kind === 'new'
          ? await orderPlacement.keyed.place(placement, order, lease)
          : await orderPlacement.keyed.resume(placement, lease)
      if ('retryAfterSeconds' in placed) throw inUse(placed.retryAfterSeconds)
      await keep(201, placed)
      return reply.code(201).send(placed)
    } catch (error) {
      // A refusal is the answer to this request; every other failure leaves the key to be retried.
      if (error instanceof OrderRejectedError) await keep(422, errorBody(request, 422, error.code, error.message))
      throw error
    }
  })

  fastify.get('/api/orders', {
    schema: {
      operationId: 'listOrders',
      tags: ['orders'],
      summary: 'The caller\'s orders, newest first',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      querystring: OrderQuery,
      response: {
        200: Type.Ref(OrderList, { description: 'one page of the caller\'s orders, with the total' }),
        ...errors
      }
    }
  }, async (request) => {
    const { page, limit } = request.query
    const { orders: list, total } = await orders.listForClient(request.user.clientId, limit, (page - 1) * limit)
    return { orders: list, page, limit, total }
  })

  fastify.get('/api/orders/:id', {
    schema: {
      operationId: 'getOrder',
      tags: ['orders'],
      summary: 'One of the caller\'s orders and its status',
      security: [{ bearerAuth: [] }, { sessionCookie: [] }],
      params: OrderParams,
      response: {
        200: Type.Ref(Order, { description: 'the order' }),
        ...errors,
        404: errorResponse('The caller has no order with this id (`ORDER_NOT_FOUND`)')
      }
    }
  }, async (request) => {
    const order = await orders.findForClient(request.user.clientId, request.params.id)
    if (order === null) throw new OrderNotFoundError()
    return order
  })
}

export default orderRoutes

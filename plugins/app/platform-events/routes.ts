import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import {
  ParkedEventNotFoundError, ParkedEventRefusedError, ParkedEventRetryUnavailableError
} from '../../../lib/errors.js'
import {
  ParkedEventList, ParkedEventParams, ParkedEventQuery, ParkedEventRetried, parkedEventSchemas
} from '../../../schemas/parked-events.js'
import {
  errorResponse, invalidRequestResponse, opsUnauthorizedResponse, unexpectedErrorResponse
} from '../../../schemas/error.js'

const notParked = {
  404: errorResponse('No event is parked under this id (`PARKED_EVENT_NOT_FOUND`): handed off or discarded already')
}

/**
 * The operator's hand on the platform events whose hand-off failed for good: list them, retry one
 * once the data is mended, or discard one that never will be.
 */
const parkedEventRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of parkedEventSchemas) fastify.addSchema(schema)
  fastify.addHook('onRequest', fastify.requireOpsToken)
  // Operator work, not portal traffic: kept out of the API's request measures, as the other operator
  // endpoints are. A retry or a discard logs its own line.
  fastify.addHook('onRoute', (route) => { route.config = { ...route.config, probe: true } })
  const { parked, handOff } = fastify.platformEvents

  fastify.get('/health/events/parked', {
    schema: {
      operationId: 'listParkedEvents',
      tags: ['events-parked'],
      security: [{ opsToken: [] }],
      summary: 'The platform events set aside because their hand-off failed for good, with the reason',
      querystring: ParkedEventQuery,
      response: {
        200: Type.Ref(ParkedEventList, { description: 'one page of parked events, the oldest first' }),
        ...invalidRequestResponse,
        ...opsUnauthorizedResponse,
        ...unexpectedErrorResponse
      }
    }
  }, async (request) => {
    const { page, limit } = request.query
    const { events, total } = await parked.list(limit, (page - 1) * limit)
    return { events, page, limit, total }
  })

  fastify.post('/health/events/parked/:id/retry', {
    schema: {
      operationId: 'retryParkedEvent',
      tags: ['events-parked'],
      security: [{ opsToken: [] }],
      summary: 'Hands a parked event off again, once its data is mended',
      description: 'Reads the order from the CRM again. Handed off, the event is no longer parked and its order is provisioned, once: the job id is the CRM order id, so a repeated retry or a replayed event never makes a second job. Safe to repeat.',
      params: ParkedEventParams,
      response: {
        200: Type.Ref(ParkedEventRetried, {
          description: 'handed off: the order is stored and its provisioning job queued'
        }),
        ...invalidRequestResponse,
        ...opsUnauthorizedResponse,
        ...notParked,
        409: errorResponse(
          'Refused again for good (`PARKED_EVENT_REFUSED`, the reason in the message): the event stays parked, its reason updated'
        ),
        ...unexpectedErrorResponse,
        503: errorResponse(
          'The CRM, the database or Redis did not answer (`PARKED_EVENT_RETRY_UNAVAILABLE`): the event stays parked as it was; retry shortly'
        )
      }
    }
  }, async (request) => {
    // Whatever failed (the CRM read, the order's statement, the job's enqueue) changed nothing: the event stays parked.
    const outcome = await handOff.retry(request.params.id).catch((error: unknown) => {
      throw new ParkedEventRetryUnavailableError({ cause: error })
    })
    if (outcome === null) throw new ParkedEventNotFoundError()
    if (!outcome.handedOff) throw new ParkedEventRefusedError(outcome.parked.reason)
    const { order } = outcome
    return { crmOrderId: order.crmOrderId ?? '', orderId: order.id, status: order.status }
  })

  fastify.delete('/health/events/parked/:id', {
    schema: {
      operationId: 'discardParkedEvent',
      tags: ['events-parked'],
      security: [{ opsToken: [] }],
      summary: 'Discards a parked event that will never be handed off (its order was cancelled, or never existed)',
      params: ParkedEventParams,
      response: {
        204: Type.Null({ description: 'discarded' }),
        ...invalidRequestResponse,
        ...opsUnauthorizedResponse,
        ...notParked,
        ...unexpectedErrorResponse
      }
    }
  }, async (request, reply) => {
    if (!await parked.remove(request.params.id)) throw new ParkedEventNotFoundError()
    request.log.warn({ parkedEventId: request.params.id }, 'parked platform event discarded by an operator')
    return reply.code(204).send(null)
  })
}

export default parkedEventRoutes

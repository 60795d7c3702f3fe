import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { CACHE_TTL_SECONDS } from './index.js'
import { ServicesCacheReport } from '../../../schemas/integrations.js'
import { unexpectedErrorResponse } from '../../../schemas/error.js'

const servicesCacheRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.addSchema(ServicesCacheReport)

  fastify.get('/api/health/services/cache', {
    config: { probe: true },
    schema: {
      operationId: 'getServicesCache',
      tags: ['health'],
      security: [],
      summary: 'Services cache: hits, misses, hit rate, latency, memory and keys',
      response: {
        200: Type.Ref(ServicesCacheReport, { description: 'the services cache' }),
        ...unexpectedErrorResponse
      }
    }
  }, async () => {
    const stats = fastify.servicesCache.stats()
    const memory = await fastify.servicesCache.memory().catch(() => null)
    return {
      status: memory === null ? 'fail' as const : 'ok' as const,
      ...stats,
      memory: {
        usedBytes: memory?.usedBytes ?? null,
        maxBytes: memory?.maxBytes ?? null,
        percent: memory?.percent ?? null
      },
      keys: memory?.keys ?? null,
      ttlSeconds: CACHE_TTL_SECONDS
    }
  })
}

export default servicesCacheRoutes

import fp from 'fastify-plugin'
import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'

async function swagger (fastify: FastifyInstance) {
  await fastify.register(fastifySwagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Portal BFF',
        description: 'Backend-for-frontend of the customer portal: health, monitoring and operations interface, and the portal API.',
        version: '0.1.0'
      },
      tags: [
        { name: 'health', description: 'Unauthenticated health and monitoring endpoints' }
      ]
    }
  })
  await fastify.register(fastifySwaggerUi, { routePrefix: '/docs' })
}

export default fp(swagger, { name: 'swagger', fastify: '5.x' })

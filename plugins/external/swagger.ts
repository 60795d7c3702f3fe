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
        { name: 'health', description: 'Unauthenticated health and monitoring endpoints' },
        { name: 'auth', description: 'Portal sign-in and sign-out' },
        { name: 'invoices', description: 'The signed-in client\'s invoices, from the billing system' },
        { name: 'orders', description: 'The signed-in client\'s orders, their provisioning status and its event stream' }
      ],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'access token from POST /auth/login' },
          opsToken: { type: 'http', scheme: 'bearer', description: 'the operations token (OPS_TOKEN) of the operator endpoints; they are public while it is unset' }
        }
      }
    }
  })
}

/**
 * The API UI at /docs: registered where the browser-facing routes are, so it gets their security
 * headers; its pages set a content security policy of their own (staticCSP), which its scripts need.
 */
async function swaggerUi (fastify: FastifyInstance) {
  await fastify.register(fastifySwaggerUi, { routePrefix: '/docs', staticCSP: true })
}

export const docsUi = fp(swaggerUi, { name: 'swagger-ui', fastify: '5.x', dependencies: ['swagger'] })

export default fp(swagger, { name: 'swagger', fastify: '5.x' })

import fp from 'fastify-plugin'
import fastifySwagger, { type FastifyDynamicSwaggerOptions } from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'

/**
 * OpenAPI 3.0 reads `nullable: true` as allowing null besides the type, but not besides an `enum`,
 * which must list null itself (the 3.0.3 clarification); @fastify/swagger writes a TypeBox union of
 * an enum and null as the enum made nullable, which a client validating the answers then refuses.
 */
function nullInNullableEnums<T> (value: T): T {
  if (Array.isArray(value)) return value.map(nullInNullableEnums) as T
  if (typeof value !== 'object' || value === null) return value
  const copy = Object.fromEntries(
    Object.entries(value).map(([key, inner]) => [key, nullInNullableEnums(inner)])
  ) as Record<string, unknown>
  if (copy.nullable === true && Array.isArray(copy.enum) && !copy.enum.includes(null)) copy.enum = [...copy.enum, null]
  return copy as T
}

/** The document's frame: what it is, where it is served, its tags and its security schemes. */
const OPENAPI: FastifyDynamicSwaggerOptions['openapi'] = {
  openapi: '3.0.3',
  info: {
    title: 'Portal BFF',
    description: 'Backend-for-frontend of the customer portal: the portal API (a browser signs in with POST /auth/session and its cookie; other clients with POST /auth/login, then Authorize with the access token), and the health, monitoring and operations interface.',
    version: '0.1.0'
  },
  // The service does not know the address it is reached at (a developer's machine, a balancer,
  // a proxy): relative to the document, "Try it out" calls the instance that served it, and a
  // generated client takes its base URL from its own configuration.
  servers: [{ url: '/', description: 'the instance serving this document' }],
  // The portal API first, in the order a front end uses it; the operator endpoints after.
  tags: [
    {
      name: 'auth',
      description: 'Sign-in and sign-out. The portal\'s browser app signs in with POST /auth/session, which sets an HttpOnly session cookie that every portal operation accepts (unsafe requests add `x-csrf: 1`); other clients sign in with POST /auth/login, whose access token every portal operation takes as `Authorization: Bearer <accessToken>`'
    },
    { name: 'invoices', description: 'The signed-in client\'s invoices, from the billing system' },
    { name: 'orders', description: 'The signed-in client\'s orders and their provisioning status' },
    {
      name: 'events',
      description: 'Server-sent events: the signed-in client\'s order status changes as they happen'
    },
    {
      name: 'health',
      description: 'Operator endpoints: health of the service, its dependencies, queues and cache; open to anyone'
    },
    {
      name: 'alerts',
      description: 'Operator endpoints: every measure of the monitoring thresholds and its level; behind the operations token when OPS_TOKEN is set'
    },
    {
      name: 'metrics',
      description: 'Operator endpoints: Prometheus metrics; behind the operations token when OPS_TOKEN is set'
    },
    {
      name: 'status',
      description: 'Operator endpoints: the figures of the status page (/status); behind the operations token when OPS_TOKEN is set'
    },
    {
      name: 'events-parked',
      description: 'Operator endpoints: the platform events whose hand-off failed for good (a data conflict, an incomplete or unknown order), to retry once the data is mended or to discard; behind the operations token when OPS_TOKEN is set'
    }
  ],
  components: {
    securitySchemes: {
      bearerAuth: {
        type: 'http',
        scheme: 'bearer',
        bearerFormat: 'JWT',
        description: 'The `accessToken` of POST /auth/login, alone: the `Bearer` prefix is added for you'
      },
      sessionCookie: {
        type: 'apiKey',
        in: 'cookie',
        name: '__Host-portal-session',
        description: 'The portal\'s browser app: the session cookie POST /auth/session sets (HttpOnly, Secure, SameSite=Strict; no script can read it). Send `x-csrf: 1` with every POST made with it'
      },
      opsToken: {
        type: 'http',
        scheme: 'bearer',
        description: 'The operations token (OPS_TOKEN) of the operator endpoints; they are open while it is unset'
      }
    }
  }
}

async function swagger (fastify: FastifyInstance) {
  await fastify.register(fastifySwagger, {
    openapi: OPENAPI,
    // This plugin writes OpenAPI 3 only.
    transformObject: (document) =>
      nullInNullableEnums('openapiObject' in document ? document.openapiObject : document.swaggerObject),
    // Shared schemas are named by their $id (Order, Invoice, ...) rather than def-0, def-1: the names
    // a generated client gives its types, which must not change when a schema is added.
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => typeof json.$id === 'string' ? json.$id : `def-${i}`
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

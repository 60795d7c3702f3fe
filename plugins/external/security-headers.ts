import fp from 'fastify-plugin'
import helmet, { type HelmetOptions } from 'helmet'
import fastifyCors from '@fastify/cors'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { EXPOSED_HEADERS } from '../../lib/request-log.js'

export interface SecurityHeadersOptions {
  /**
   * What the scope's routes answer: pages a browser renders, or API responses (JSON, an SSE stream) it never renders.
   */
  serves: 'pages' | 'api'
}

/**
 * Helmet for responses a browser never renders, as OWASP's REST security cheat sheet advises:
 * nothing may load in them or frame them, and the headers that only a document heeds are left out
 * (an SSE stream keeps its headers for its whole life: 1 KB a stream with Helmet's defaults).
 */
const API_POLICY: Readonly<HelmetOptions> = {
  contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } },
  xFrameOptions: { action: 'deny' },
  crossOriginOpenerPolicy: false,
  originAgentCluster: false,
  xDnsPrefetchControl: false,
  xDownloadOptions: false,
  xPermittedCrossDomainPolicies: false,
  xXssProtection: false
}

/**
 * What the API scope answers is a client's data, a token, or a refusal to give either: no cache,
 * shared or the browser's own, may keep it (a shared computer's back button, a proxy).
 */
const PRIVATE_ANSWER = { 'cache-control': 'no-store' }

/**
 * The headers Helmet sets for a policy that depends on nothing of the request (no nonces), which
 * Helmet writes once onto a recording response. @fastify/helmet builds Helmet's whole middleware
 * anew on every request: about 10 µs of CPU each, a tenth of a cached portal read.
 */
function helmetHeaders (options: Readonly<HelmetOptions> = {}): Record<string, string> {
  const headers: Record<string, string> = {}
  const recorder = {
    setHeader (name: string, value: string | number | readonly string[]) {
      headers[name.toLowerCase()] = String(value)
    },
    removeHeader (name: string) { Reflect.deleteProperty(headers, name.toLowerCase()) }
  }
  helmet(options)({} as IncomingMessage, recorder as unknown as ServerResponse, (error?: unknown) => {
    if (error !== undefined) throw error
  })
  return headers
}

async function securityHeaders (fastify: FastifyInstance, { serves }: SecurityHeadersOptions) {
  // Pages get Helmet's defaults. The API UI sets its own content security policy for its pages
  // (staticCSP in the swagger plugin), which replaces this one: it is set later in the request.
  const headers = serves === 'api' ? { ...helmetHeaders(API_POLICY), ...PRIVATE_ANSWER } : helmetHeaders()
  fastify.addHook('onRequest', (_request, reply, done) => {
    reply.headers(headers)
    done()
  })
}

/** How long a browser may reuse a preflight: Chromium keeps one at most 2 hours, Firefox 1 day. */
export const PREFLIGHT_MAX_AGE_S = 7200

/**
 * CORS for the portal's origins (CORS_ORIGIN), once for every browser-facing route (its preflight route is
 * global). Credentialed: the page on a sibling origin sends the session cookie. A 404 gets the
 * same headers from the not-found handler, which lies outside this scope.
 */
async function cors (fastify: FastifyInstance) {
  // Unset CORS_ORIGIN means no cross-origin access at all.
  await fastify.register(fastifyCors, {
    origin: fastify.config.corsOrigins.length === 0 ? false : [...fastify.config.corsOrigins],
    credentials: true,
    methods: ['GET', 'POST'],
    allowedHeaders: ['authorization', 'content-type', 'x-correlation-id', 'last-event-id', 'x-csrf', 'idempotency-key'],
    exposedHeaders: EXPOSED_HEADERS,
    maxAge: PREFLIGHT_MAX_AGE_S
  })
}

export const browserCors = fp(cors, { name: 'cors', fastify: '5.x', decorators: { fastify: ['config'] } })

export default fp(securityHeaders, { name: 'security-headers', fastify: '5.x' })

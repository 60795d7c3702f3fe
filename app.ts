import type { Socket } from 'node:net'
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyReply,
  type FastifyRequest
} from 'fastify'
import type { Config } from './schemas/config.js'
import { UPSTREAMS } from './integrations/registry.js'
import { ContextLogger, LazyChildLogger, createLogger } from './lib/logger.js'
import { runInContext } from './lib/request-context.js'
import { tracingEnabled, traceIdsOfLine } from './lib/tracing.js'
import { CORRELATION_HEADER, RequestLogController, correlationIdOf } from './lib/request-log.js'
import { exactBodyValidator, reusingSerializer } from './lib/validator.js'
import { BODY_LIMIT_BYTES, errorBody } from './schemas/error.js'
import sensible from './plugins/external/sensible.js'
import opentelemetry from './plugins/external/opentelemetry.js'
import monitoring from './plugins/app/monitoring/index.js'
import swagger, { docsUi } from './plugins/external/swagger.js'
import postgres from './plugins/external/postgres.js'
import redis from './plugins/external/redis.js'
import jwt from './plugins/external/jwt.js'
import cookie from './plugins/external/cookie.js'
import rateLimit from './plugins/external/rate-limit.js'
import securityHeaders, { browserCors } from './plugins/external/security-headers.js'
import errorHandler from './plugins/app/error-handler.js'
import { handleClientError } from './plugins/app/client-errors.js'
import correlation from './plugins/app/correlation.js'
import health from './plugins/app/health.js'
import database, { migrationBoundMs } from './plugins/app/database/index.js'
import redisCheck from './plugins/app/redis-check.js'
import pubsub from './plugins/app/pubsub.js'
import servicesCache, { servicesCacheRoutes } from './plugins/app/services-cache/index.js'
import upstreamsPlugin, { type ServiceUpstream } from './plugins/app/upstreams/index.js'
import access, { authRoutes, oidcRoutes } from './plugins/app/access/index.js'
import opsAccess from './plugins/app/ops-access.js'
import orders, { orderCrmStatus, orderPlacement, orderRoutes } from './plugins/app/orders/index.js'
import sseStreams, { streamRoutes } from './plugins/app/sse-streams/index.js'
import platformEvents from './plugins/app/platform-events/index.js'
import healthRoutes from './routes/health.js'
import queueRoutes from './routes/queues.js'
import integrationHealthRoutes from './routes/integration-health.js'
import alertRoutes from './routes/alerts.js'
import metricsRoutes from './routes/metrics.js'
import statusRoutes from './routes/status.js'
import invoiceRoutes from './routes/api/invoices.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
    /** Opens the log files again by name, for logrotate's renaming rotation (SIGHUP in server.ts). */
    reopenLogFiles: () => void
    /** A logger of the service's own work (an order's provisioning), whose lines carry its id. */
    logFor: (correlationId: string) => FastifyBaseLogger
  }
}

export interface BuildOptions {
  config: Config
  /** Log to stdout as well as to the log files (default true). */
  logToStdout?: boolean
  /**
   * More pages, served beside the status page with its security headers: the development entry's reference portal page.
   */
  pages?: FastifyPluginAsync
  /** The upstream registry (default the product's); its settings groups are read into `config` by the same list. */
  upstreams?: readonly ServiceUpstream[]
}

/**
 * How often Node looks for requests past their receive timeout. Node's own 30 s would let a
 * slow-header client hold its connection up to twice the timeout.
 */
const TIMEOUT_CHECK_INTERVAL_MS = 1000

/** Fastify's own plugin timeout, and what a plugin gets beyond its own bound to report it. */
const DEFAULT_PLUGIN_TIMEOUT_MS = 10_000
const PLUGIN_TIMEOUT_MARGIN_MS = 5000

/**
 * The portal API: every route in this scope needs the database reachable and a valid access token.
 * Placing orders, its idempotency keys and the reconciliation with its tasks are read by the order
 * routes only: the orders feature scope keeps them with those routes, off the root (decision 0075).
 */
async function portalApi (portal: FastifyInstance): Promise<void> {
  portal.addHook('onRequest', portal.requireDatabase)
  portal.addHook('onRequest', portal.authenticate)
  await portal.register(invoiceRoutes)
  await portal.register(async function orderScope (scope) {
    await scope.register(orderPlacement)
    await scope.register(orderCrmStatus)
    await scope.register(orderRoutes)
  })
  await portal.register(streamRoutes)
}

/** Builds the service, ready to inject requests into or to listen. */
export async function build ({
  config,
  logToStdout = true,
  pages: extraPages,
  upstreams = UPSTREAMS
}: BuildOptions): Promise<FastifyInstance> {
  const logger = createLogger({
    level: config.LOG_LEVEL,
    service: config.SERVICE_NAME,
    logDir: config.LOG_DIR,
    stdout: logToStdout,
    lineFields: tracingEnabled() ? traceIdsOfLine : undefined
  })
  await logger.ready
  const app = Fastify({
    // Fastify's logger type is pino's whole interface; these two are the part of it Fastify calls.
    loggerInstance: new ContextLogger(logger.system as FastifyBaseLogger) as unknown as FastifyBaseLogger,
    // Request loggers descend from the root logger, so their correlation id replaces the system one.
    childLoggerFactory: (_logger, bindings, options) =>
      new LazyChildLogger(logger.root, bindings, options) as unknown as FastifyBaseLogger,
    genReqId: correlationIdOf,
    requestIdHeader: false,
    logController: new RequestLogController(),
    bodyLimit: BODY_LIMIT_BYTES,
    // The migration step bounds itself, naming its setting: Fastify's plugin timeout must not end it first.
    pluginTimeout: Math.max(
      DEFAULT_PLUGIN_TIMEOUT_MS,
      migrationBoundMs({
        connectTimeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS,
        migrationTimeoutMs: config.DATABASE_MIGRATION_TIMEOUT_MS
      }) + PLUGIN_TIMEOUT_MARGIN_MS
    ),
    // Fastify turns off Node's bound on receiving a request (0): a client that never finishes its
    // headers or body would hold its connection for good. Responses (an SSE stream) are not bounded by it.
    requestTimeout: config.REQUEST_RECEIVE_TIMEOUT_MS,
    http: { headersTimeout: config.REQUEST_RECEIVE_TIMEOUT_MS, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS },
    trustProxy: config.trustProxy,
    // A URL Fastify cannot route (bad percent-encoding) is refused before any hook runs: answered
    // here in the service's error shape, with the correlation id, instead of Fastify's own body.
    frameworkErrors: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      request.log.info({ statusCode: 400, code: error.code, method: request.method }, 'request refused before routing')
      reply.code(400).header(CORRELATION_HEADER, request.id).send(errorBody(request, 400, error.code, error.message))
    },
    clientErrorHandler: (error: Error, socket: Socket) => handleClientError(error, socket, logger.root),
    // Unknown fields are an error, not silently dropped: the schemas say additionalProperties: false.
    ajv: { customOptions: { removeAdditional: false } },
    schemaController: {
      compilersFactory: { buildValidator: exactBodyValidator(), buildSerializer: reusingSerializer() }
    }
  })

  // Everything a request does runs in its request context: the service's own lines carry its correlation
  // id, and its upstream calls send it on. Probes, which log nothing of their own, skip the cost.
  app.addHook('onRequest', (request, _reply, done) => {
    if (request.routeOptions.config.probe === true) {
      done()
      return
    }
    runInContext({ correlationId: request.id, log: request.log }, done)
  })

  app.decorate('config', config)
  app.decorate('reopenLogFiles', () => logger.reopen())
  app.decorate('logFor', (correlationId: string) => logger.root.child({ correlationId }) as FastifyBaseLogger)
  app.addHook('onClose', async () => logger.flush())
  // Fastify drops its 'error' listener once the server listens: a connection the server fails to
  // accept (file descriptors exhausted) would emit an error nobody hears, which ends the process.
  // The server keeps listening: the error is the one connection's.
  app.addHook('onListen', (done) => {
    app.server.on('error', (error) =>
      app.log.error({ err: error }, 'HTTP server: a connection could not be accepted; serving on')
    )
    done()
  })

  // A plugin that fails to start must not leave the others' pools and sockets open.
  try {
    // Before any route, so that every request but the probes' has its span.
    await app.register(opentelemetry)
    await app.register(sensible)
    // First of the service's own: every other plugin registers its measures with it.
    await app.register(monitoring, { upstreams })
    await app.register(swagger)
    await app.register(postgres)
    await app.register(redis)
    await app.register(jwt)
    await app.register(cookie)
    await app.register(rateLimit)

    await app.register(errorHandler)
    await app.register(correlation)
    await app.register(health)
    await app.register(database)
    await app.register(redisCheck)
    await app.register(pubsub)
    await app.register(servicesCache)
    await app.register(upstreamsPlugin, { upstreams })
    await app.register(opsAccess)
    await app.register(orders)
    await app.register(platformEvents)

    await app.register(healthRoutes)
    await app.register(queueRoutes, { upstreams })
    await app.register(servicesCacheRoutes)
    await app.register(integrationHealthRoutes, { upstreams })
    await app.register(alertRoutes)
    await app.register(metricsRoutes)
    // What browsers use gets security headers and CORS; machine-polled probes, outside this
    // scope, get neither: their hooks would cost /health a third of its throughput.
    await app.register(async function browserFacing (scope) {
      await scope.register(browserCors)
      await scope.register(async function pages (pages) {
        await pages.register(securityHeaders, { serves: 'pages' })
        await pages.register(docsUi)
        await pages.register(statusRoutes)
        if (extraPages !== undefined) await pages.register(extraPages)
      })
      await scope.register(async function api (api) {
        await api.register(securityHeaders, { serves: 'api' })
        // Signing in and the sessions, and the streams that end with them, are read by this scope's
        // routes only: their decorators are the scope's, not the root's (decision 0129).
        await api.register(access)
        await api.register(sseStreams)
        await api.register(authRoutes)
        await api.register(oidcRoutes)
        await api.register(portalApi)
      })
    })

    await app.ready()
  } catch (error) {
    await app.close().catch(() => {})
    throw error
  }
  return app
}

import { join } from 'node:path'
import fastifyStatic from '@fastify/static'
import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { projectRoot } from '../lib/project-root.js'
import { coreHealthOf } from '../lib/health-checks.js'
import { StatusSummary, alertSchemas } from '../schemas/monitoring.js'
import { opsUnauthorizedResponse, unexpectedErrorResponse } from '../schemas/error.js'
import { pendingOrdersReport } from '../schemas/queues.js'

/** Where the runbooks are served: every alert's `runbook_url` points here, through the balancer. */
export const RUNBOOKS = '/status/runbooks/'

/** The daily usage while the store that keeps it does not answer. */
const NO_USAGE = { used: 0, limit: null, percent: null, limitSource: 'unknown' } as const

/**
 * The operator page: static HTML, CSS and JS (no inline script, so it runs under the service's own
 * content security policy), polling /status/summary every 30 s.
 */
const statusRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of alertSchemas(fastify.monitoring.rows.map(({ measure }) => measure))) fastify.addSchema(schema)
  // The page, its files and its data alike; not the runbooks, which hold no secret: a page's
  // `runbook_url` opens without the token, from any instance behind the balancer.
  fastify.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url?.startsWith(RUNBOOKS) !== true) await fastify.requireOpsToken(request, reply)
  })
  // An open page polls: its files and data are probes, logged at debug and not counted as API requests.
  fastify.addHook('onRoute', (route) => { route.config = { ...route.config, probe: true } })

  // The page's files are few and small; `no-cache` has the browser ask again, so a new release shows at once.
  await fastify.register(fastifyStatic, {
    root: join(projectRoot, 'public'),
    prefix: '/status/',
    index: false,
    wildcard: false,
    cacheControl: false,
    setHeaders: (response) => response.setHeader('cache-control', 'no-cache')
  })
  fastify.get('/status', { schema: { hide: true } }, (_request, reply) => reply.sendFile('status.html'))
  // The runbook of each alert, as the repository has it, so that the page's links work wherever it is
  // served from; as plain text, which every browser shows.
  await fastify.register(fastifyStatic, {
    root: join(projectRoot, 'docs', 'runbooks'),
    prefix: RUNBOOKS,
    decorateReply: false,
    index: false,
    wildcard: false,
    cacheControl: false,
    setHeaders: (response) => response.setHeader('cache-control', 'no-cache')
  })
  fastify.addHook('onSend', async (request, reply) => {
    if (request.routeOptions.url?.startsWith(RUNBOOKS) === true && reply.statusCode === 200) {
      reply.header('content-type', 'text/plain; charset=utf-8')
    }
  })

  fastify.get('/status/summary', {
    config: { probe: true },
    schema: {
      operationId: 'getStatusSummary',
      tags: ['status'],
      security: [{ opsToken: [] }],
      summary: 'What the status page shows: core health, both queues, CRM usage, the job queue, the orders in Pending Review, the subscriber and every alert',
      response: {
        200: Type.Ref(StatusSummary, { description: 'the status page\'s figures' }),
        ...opsUnauthorizedResponse,
        ...unexpectedErrorResponse
      }
    }
  }, async () => {
    const { snapshot, judgement } = await fastify.monitoring.evaluate()
    const {
      core = coreHealthOf({}),
      queues,
      crmUsage = NO_USAGE,
      jobs = null,
      subscriber = null,
      parkedEvents = null,
      streams = null,
      blacklist = null,
      ordersPending
    } = snapshot.parts
    return {
      timestamp: snapshot.timestamp,
      level: judgement.level,
      core,
      billing: queues?.billing ?? null,
      crm: queues === undefined ? null : { ...queues.crm, dailyUsage: crmUsage },
      jobs,
      orders: ordersPending === undefined ? null : pendingOrdersReport(ordersPending),
      subscriber: subscriber === null ? null : { ...subscriber, parked: parkedEvents },
      streams,
      blacklist,
      alerts: judgement.alerts
    }
  })
}

export default statusRoutes

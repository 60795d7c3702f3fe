import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Type } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { projectRoot } from '../lib/project-root.js'
import { coreHealthOf } from '../plugins/app/health.js'
import { StatusSummary, alertSchemas } from '../plugins/app/monitoring/schemas.js'
import { unexpectedErrorResponse } from '../schemas/error.js'

/** The daily usage while the store that keeps it does not answer. */
const NO_USAGE = { used: 0, limit: null, percent: null, limitSource: 'unknown' } as const

const ASSETS = {
  '/status': { file: 'status.html', type: 'text/html; charset=utf-8' },
  '/status/status.js': { file: 'status.js', type: 'text/javascript; charset=utf-8' },
  '/status/status.css': { file: 'status.css', type: 'text/css; charset=utf-8' }
} as const

/**
 * The operator page: static HTML, CSS and JS (no inline script, so it runs under the service's own
 * content security policy), polling /status/summary every 30 s.
 */
const statusRoutes: FastifyPluginAsyncTypebox = async (fastify) => {
  for (const schema of alertSchemas) fastify.addSchema(schema)

  const directory = join(projectRoot, 'public')
  try {
    const assets = Object.entries(ASSETS).map(([url, { file, type }]) => ({ url, type, body: readFileSync(join(directory, file)) }))
    for (const { url, type, body } of assets) {
      fastify.get(url, { config: { probe: true }, schema: { hide: true } }, async (_request, reply) => {
        return reply.type(type).header('cache-control', 'no-cache').send(body)
      })
    }
  } catch (error) {
    // A missing page must not stop the service; the summary and every other route still serve.
    fastify.log.error({ err: error, directory }, 'status page files are missing: GET /status is not served')
  }

  fastify.get('/status/summary', {
    config: { probe: true },
    schema: {
      tags: ['health'],
      summary: 'What the status page shows: core health, both queues, CRM usage, the job queue, the subscriber and every alert',
      response: { 200: Type.Ref(StatusSummary, { description: 'the status page\'s figures' }), ...unexpectedErrorResponse }
    }
  }, async () => {
    const { snapshot, judgement } = await fastify.monitoring.evaluate()
    const { core = coreHealthOf({}), queues, crmUsage = NO_USAGE, jobs = null, subscriber = null } = snapshot.parts
    return {
      timestamp: snapshot.timestamp,
      level: judgement.level,
      core,
      billing: queues?.billing ?? null,
      crm: queues === undefined ? null : { ...queues.crm, dailyUsage: crmUsage },
      jobs,
      subscriber,
      alerts: judgement.alerts
    }
  })
}

export default statusRoutes

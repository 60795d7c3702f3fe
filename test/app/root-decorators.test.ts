import Fastify from 'fastify'
import t from 'tap'
import { buildTestApp } from '../helpers/app.js'

/**
 * What the service decorates its root instance with: what every plugin and route of any scope
 * can read. The list is written out so that a new root decorator is a conscious change; a concern's
 * own parts belong in its feature scope (decisions/0075).
 */
const ROOT_DECORATORS = [
  // The third-party plugins' (plugins/external).
  'assert', 'httpErrors', 'to', 'pg', 'redis', 'jwt', 'parseCookie', 'serializeCookie', 'rateLimit', 'createRateLimit', 'swagger',
  // app.ts
  'config', 'reopenLogFiles', 'logFor',
  // The service's plugins (plugins/app), in the order app.ts registers them.
  'metrics', 'monitoring', 'requestObserver',
  'coreHealth', 'integrationHealth', 'lifecycle',
  'requireDatabase',
  'pubsub',
  'billingQueue', 'crmQueue',
  'servicesCache',
  'billing', 'crm', 'telecom', 'crmUsage', 'upstreamCalls',
  'tokenBlacklist',
  'sessions', 'sessionCookieHeader',
  'authenticate', 'authenticateSession', 'requireSameSite',
  'requireOpsToken',
  'orders', 'pendingOrders', 'statusChanges', 'orderPlacement', 'orderIdempotencyKeys', 'orderReconciliation',
  'sseStreams',
  'jobQueue',
  'parkedEvents', 'eventHandOff', 'eventSubscription',
  'orderCrmStatus'
]

/** The instance's own properties that a bare Fastify instance does not have: its decorators. */
async function decoratorsOf (app: object): Promise<string[]> {
  const bare = Fastify()
  await bare.ready()
  const own = new Set(Object.keys(bare))
  await bare.close()
  return Object.keys(app).filter((key) => !own.has(key)).sort()
}

t.test('the root instance carries the listed decorators, and no others', async (t) => {
  const app = await buildTestApp(t)
  const decorators = await decoratorsOf(app)
  t.same(decorators, [...ROOT_DECORATORS].sort())
})

import Fastify from 'fastify'
import t from 'tap'
import { buildTestApp, scopeWith } from '../helpers/app.js'

/**
 * What the service decorates its root instance with: what every plugin and route of any scope
 * can read. The list is written out so that a new root decorator is a conscious change: a concern
 * decorates the narrowest scope that holds its readers, and shows the root one face only when
 * another concern outside that scope reads it (decisions 0075, 0129).
 */
const ROOT_DECORATORS = [
  // The third-party plugins' (plugins/external).
  'assert', 'httpErrors', 'to', 'pg', 'redis', 'jwt', 'parseCookie', 'serializeCookie', 'rateLimit', 'createRateLimit', 'swagger',
  // The rate-limit wrapper's own: the per-client limit for the access token's check, which counts with it (decision 0108).
  'clientRequestLimit',
  // app.ts
  'config', 'reopenLogFiles', 'logFor',
  // The service's plugins (plugins/app), in the order app.ts registers them. An infrastructure
  // concern is one decorator, its parts under it: health.core, upstreams.billing.queue (decision 0128).
  'metrics', 'monitoring', 'requestObserver',
  'health',
  'requireDatabase',
  'pubsub',
  // Read by the invoice routes (portal API) and by the cache probe outside the browser-facing scope.
  'servicesCache',
  'upstreams',
  // The ops routes' guard: they sit outside the browser-facing scope.
  'requireOpsToken',
  // The orders concern's one face: its store, the orders in Pending Review, the status changes and the provisioning jobs.
  'orders',
  // The platform events' one face: the subscription, the parked events and the hand-off.
  'platformEvents'
]

/**
 * What the browser-facing API scope keeps to itself: the access concern (signing in, the sessions,
 * the authentication hooks) and the SSE streams, read by /auth, /oidc and the portal API only.
 */
const API_SCOPE_DECORATORS = [
  'tokenBlacklist',
  'sessions', 'sessionCookieHeader',
  'authenticate', 'authenticateSession', 'requireSameSite',
  'oidcSignIn',
  'sseStreams'
]

/** What the orders feature scope keeps to itself: read by the order routes and the reconciliation only. */
const ORDER_SCOPE_DECORATORS = ['orderPlacement', 'orderIdempotencyKeys', 'orderReconciliation', 'orderCrmStatus']

/** The instance's own properties that a bare Fastify instance does not have: its decorators. */
async function decoratorsOf (app: object): Promise<string[]> {
  const bare = Fastify()
  await bare.ready()
  const own = new Set(Object.keys(bare))
  await bare.close()
  return Object.keys(app).filter((key) => !own.has(key)).sort()
}

t.test('the root instance carries the listed decorators, and no others; the API scope and the orders scope their own', async (t) => {
  const app = await buildTestApp(t)
  t.same(await decoratorsOf(app), [...ROOT_DECORATORS].sort())
  const apiScope = scopeWith(app, 'sessions')
  t.same(API_SCOPE_DECORATORS.filter((name) => !apiScope.hasDecorator(name)), [], 'the API scope carries access and the streams')
  const orderScope = scopeWith(app, 'orderPlacement')
  t.same(ORDER_SCOPE_DECORATORS.filter((name) => !orderScope.hasDecorator(name)), [], 'the orders scope carries its parts')
})

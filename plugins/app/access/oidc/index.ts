import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { OidcProvider } from '../../../../integrations/oidc/provider.js'
import { Periodic } from '../../../../lib/periodic.js'
import { Sealer } from '../../../../lib/sealed.js'
import { OidcSignIn } from './sign-in.js'

export { default as oidcRoutes } from './routes.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The OpenID Connect sign-in; undefined without OIDC_ISSUER. */
    oidcSignIn: OidcSignIn | undefined
  }
}

/** While the provider's discovery document could not be read, it is asked again this often (decision 0097). */
export const DISCOVERY_RETRY_MS = 15_000

async function oidc (fastify: FastifyInstance) {
  const { oidc: settings, UPSTREAM_TIMEOUT_MS, REDIS_KEY_PREFIX, SESSION_MAX_AGE_S } = fastify.config
  if (settings === undefined) {
    fastify.decorate('oidcSignIn', undefined)
    return
  }
  const provider = new OidcProvider({ ...settings, timeoutMs: UPSTREAM_TIMEOUT_MS })
  fastify.decorate('oidcSignIn', new OidcSignIn({
    provider,
    redis: fastify.redis,
    prefix: REDIS_KEY_PREFIX,
    sessions: fastify.sessions,
    sealer: new Sealer(settings.clientSecret, 'id token'),
    maxAgeMs: SESSION_MAX_AGE_S * 1000
  }))
  // A provider that does not answer at start leaves the service up, its sign-in unavailable
  // (503) until the provider answers: every other route, and the sessions begun, go on.
  let discovering: Periodic | undefined
  const discover = () => provider.discover().then(() => {
    fastify.log.info({ issuer: settings.issuer }, 'OpenID Connect provider discovered')
    discovering?.stop().catch(() => {})
  }, (error: unknown) => {
    fastify.log.error(
      { err: error, issuer: settings.issuer },
      'OIDC_ISSUER: the provider\'s discovery document could not be read; OpenID Connect sign-in is unavailable until it can'
    )
  })
  await discover()
  if (!provider.discovered) discovering = new Periodic(discover, DISCOVERY_RETRY_MS)
  fastify.addHook('onClose', async () => { await discovering?.stop() })
}

export default fp(oidc, {
  name: 'oidc',
  fastify: '5.x',
  dependencies: ['redis', 'sessions'],
  decorators: { fastify: ['config'] }
})

import { readConfig, serve } from '../server.js'
import { UPSTREAMS } from '../integrations/registry.js'
import { startSandbox } from './sandbox/index.js'
import { startSandboxIdentityProvider } from './sandbox/identity.js'
import portalPage from './portal/index.js'
import { firstReplayIdAfterStored } from './stored-replay.js'

/**
 * The development entry (`npm start`): the service's own entry, with the upstream sandbox started
 * in this process for every upstream left unconfigured, and the reference portal page at /portal/.
 * Outside production only; in production this is the service's entry as it is, and a missing
 * setting stops the start.
 */
const loaded = readConfig()
const { config, warnings } = loaded
const missing = config.missingUpstreamSettings
if (config.isProduction) {
  await serve(loaded)
} else if (missing.length === 0) {
  await serve(loaded, { pages: portalPage })
} else {
  const sandbox = await startSandbox({ crm: { streaming: { firstReplayId: await firstReplayIdAfterStored(config.DATABASE_URL) } } })
  const upstreamSettings = { ...config.upstreamSettings }
  for (const { name, settings } of UPSTREAMS) {
    upstreamSettings[name] ??= Object.fromEntries(Object.keys(settings).map((setting) => [setting, sandbox.settings[setting]]))
  }
  // The quick start provisions for real: the sandbox CRM raises the platform events, unless told otherwise.
  const eventsEnabled = process.env.CRM_EVENTS_ENABLED === undefined || process.env.CRM_EVENTS_ENABLED === '' ? true : config.CRM_EVENTS_ENABLED
  // Billing's sandbox is also the identity provider, as WHMCS is, unless OIDC_ISSUER names another
  // or billing is a real one. The provider sends browsers back to the service's port, which must be
  // known (not PORT=0). Password sign-in stays on beside it unless PASSWORD_SIGN_IN says otherwise.
  const sandboxProvider = config.oidc === undefined && config.upstreamSettings.billing === undefined && config.PORT !== 0
    ? await startSandboxIdentityProvider({ portalOrigins: [...config.publicOrigins, ...['127.0.0.1', 'localhost'].map((host) => `http://${host}:${config.PORT}`)] })
    : undefined
  const oidc = sandboxProvider === undefined ? config.oidc : { issuer: sandboxProvider.issuer, clientId: sandboxProvider.settings.OIDC_CLIENT_ID, clientSecret: sandboxProvider.settings.OIDC_CLIENT_SECRET, scopes: 'openid profile email' }
  const passwordSignIn = sandboxProvider === undefined || (process.env.PASSWORD_SIGN_IN ?? '') !== '' ? config.PASSWORD_SIGN_IN : true
  const app = await serve({
    config: { ...config, upstreamSettings, CRM_EVENTS_ENABLED: eventsEnabled, missingUpstreamSettings: [], oidc, PASSWORD_SIGN_IN: passwordSignIn },
    warnings: [
      ...warnings,
      `UPSTREAM SANDBOX IN USE: ${missing.join(', ')} not set, so ${new Intl.ListFormat('en-GB').format(UPSTREAMS.map(({ title }) => title))} calls go to the built-in simulators in this process. Set them to reach the real systems.`
    ]
  }, {
    onClosed: async () => {
      await sandboxProvider?.close()
      await sandbox.close()
    },
    pages: portalPage
  })
  app.log.info({ ...Object.fromEntries(UPSTREAMS.map(({ name }) => [name, sandbox[name].url])), identityProvider: sandboxProvider?.issuer, crmEvents: eventsEnabled }, 'upstream sandbox listening (sign-in users and products: dev/sandbox/README.md)')
}

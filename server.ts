import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import { build } from './app.js'
import { ConfigError, loadConfig, type Config, type LoadedConfig } from './lib/config.js'

function readConfig (): LoadedConfig {
  try {
    return loadConfig(process.env)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    process.stderr.write(`${error.message}\n`)
    process.exit(1)
  }
}

/**
 * Outside production, the upstreams left unconfigured (loadConfig refuses one configured in part)
 * are served by the built-in sandbox, started in this process. Production refuses to start without them.
 */
async function withSandbox (config: Config): Promise<{ config: Config, close?: () => Promise<void> }> {
  if (config.isProduction || config.missingUpstreamSettings.length === 0) return { config }
  const { startSandbox } = await import('./sandbox/index.js')
  const sandbox = await startSandbox()
  const filled: Partial<Config> = {}
  for (const name of config.missingUpstreamSettings) filled[name] = sandbox.settings[name]
  return { config: { ...config, ...filled, missingUpstreamSettings: [] }, close: sandbox.close }
}

const loaded = readConfig()
const { config, close: closeSandbox } = await withSandbox(loaded.config)
const warnings = [...loaded.warnings]
if (closeSandbox !== undefined) {
  warnings.push(`UPSTREAM SANDBOX IN USE: ${loaded.config.missingUpstreamSettings.join(', ')} not set, so billing, CRM and telecom calls go to the built-in simulators in this process. Set them to reach the real systems.`)
}
const app = await build({ config }).catch((error: unknown) => {
  process.stderr.write(`Startup failed: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exit(1)
})
for (const warning of warnings) app.log.warn(warning)
// logrotate's postrotate `kill -HUP`: new files under the old names, no line lost. SIGHUP is
// not a shutdown signal here (close-with-grace makes it one by default).
process.on('SIGHUP', () => {
  app.reopenLogFiles()
  app.log.info('log files reopened (SIGHUP)')
})

closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_MS, logger: app.log, skip: ['SIGHUP'] }, async ({ signal, err }) => {
  if (err !== undefined) app.log.fatal({ err }, 'shutting down after an unexpected error')
  else app.log.info({ signal }, 'shutting down: draining in-flight requests')
  app.lifecycle.draining = true
  // Let load balancers see the readiness probe fail before the listener closes.
  if (config.SHUTDOWN_DELAY_MS > 0) await sleep(config.SHUTDOWN_DELAY_MS)
  await app.close()
  await closeSandbox?.()
  app.log.info('shutdown complete')
})

await app.listen({ port: config.PORT, host: config.HOST }).catch(async (error: unknown) => {
  // A port in use (EADDRINUSE) or a host not of this machine (EADDRNOTAVAIL, ENOTFOUND): one line
  // naming the settings, as for any other setting that stops the start.
  const { code } = error as { code?: unknown }
  process.stderr.write(`Startup failed: cannot listen on ${config.HOST}:${config.PORT}${typeof code === 'string' ? ` (${code})` : ''}; check HOST and PORT\n`)
  await app.close()
  await closeSandbox?.()
  process.exit(1)
})

import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import { build } from './app.js'
import { ConfigError, loadConfig, type LoadedConfig } from './lib/config.js'

function readConfig (): LoadedConfig {
  try {
    return loadConfig(process.env)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    process.stderr.write(`${error.message}\n`)
    process.exit(1)
  }
}

const { config, warnings } = readConfig()
const app = await build({ config }).catch((error: unknown) => {
  process.stderr.write(`Startup failed: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exit(1)
})
for (const warning of warnings) app.log.warn(warning)

closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_MS, logger: app.log }, async ({ signal, err }) => {
  if (err !== undefined) app.log.fatal({ err }, 'shutting down after an unexpected error')
  else app.log.info({ signal }, 'shutting down: draining in-flight requests')
  app.lifecycle.draining = true
  // Let load balancers see the readiness probe fail before the listener closes.
  if (config.SHUTDOWN_DELAY_MS > 0) await sleep(config.SHUTDOWN_DELAY_MS)
  await app.close()
  app.log.info('shutdown complete')
})

await app.listen({ port: config.PORT, host: config.HOST })

import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { build } from './app.js'
import { ConfigError, loadConfig, type LoadedConfig } from './schemas/config.js'

/** Reads the settings; a bad one ends the process with one line naming it. */
export function readConfig (env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  try {
    return loadConfig(env)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    process.stderr.write(`${error.message}\n`)
    process.exit(1)
  }
}

export interface ServeOptions {
  /** Closes what the caller started beside the service, once the service has closed. */
  onClosed?: () => Promise<void>
}

/** Builds the service, listens, and wires graceful shutdown and log reopening. */
export async function serve ({ config, warnings }: LoadedConfig, { onClosed }: ServeOptions = {}): Promise<FastifyInstance> {
  const app = await build({ config }).catch(async (error: unknown) => {
    process.stderr.write(`Startup failed: ${error instanceof Error ? error.message : String(error)}\n`)
    await onClosed?.()
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
    await onClosed?.()
    app.log.info('shutdown complete')
  })

  await app.listen({ port: config.PORT, host: config.HOST }).catch(async (error: unknown) => {
    // A port in use (EADDRINUSE) or a host not of this machine (EADDRNOTAVAIL, ENOTFOUND): one line
    // naming the settings, as for any other setting that stops the start.
    const { code } = error as { code?: unknown }
    process.stderr.write(`Startup failed: cannot listen on ${config.HOST}:${config.PORT}${typeof code === 'string' ? ` (${code})` : ''}; check HOST and PORT\n`)
    await app.close()
    await onClosed?.()
    process.exit(1)
  })
  return app
}

// Run as a program (`node dist/server.js`), not imported by another entry.
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await serve(readConfig())
}

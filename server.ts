import './lib/runtime-check.js'
import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { build, type BuildOptions } from './app.js'
import { ConfigError, loadConfig, type LoadedConfig } from './settings.js'
import { startTracing, type Tracing } from './lib/tracing-start.js'

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

/**
 * What the end of SHUTDOWN_TIMEOUT_MS keeps for closing the plugins once the connections are gone:
 * releasing the subscription lease, closing queues and pools takes under 4 s even with Redis hung.
 */
const CLOSE_RESERVE_MS = 5000

/** What the shutdown gives the trace exporter to send the spans it still holds, out of CLOSE_RESERVE_MS. */
const TRACE_FLUSH_MS = 1000

export interface ServeOptions {
  /** Closes what the caller started beside the service, once the service has closed. */
  onClosed?: () => Promise<void>
  /** More pages to serve (the development entry's reference portal page). */
  pages?: BuildOptions['pages']
}

/** Builds the service, listens, and wires graceful shutdown and log reopening. */
export async function serve (
  { config, warnings }: LoadedConfig,
  { onClosed, pages }: ServeOptions = {}
): Promise<FastifyInstance> {
  // OpenTelemetry's SDK, when the OTEL_* settings ask for it, is running before the first span.
  let tracing: Tracing | undefined
  const app = await startTracing(process.env, config.SERVICE_NAME)
    .then((started) => {
      tracing = started
      return build({ config, pages })
    })
    .catch(async (error: unknown) => {
      process.stderr.write(`Startup failed: ${error instanceof Error ? error.message : String(error)}\n`)
      await onClosed?.()
      process.exit(1)
    })
  for (const warning of [...warnings, ...tracing?.warnings ?? []]) app.log.warn(warning)
  tracing?.logTo(app.logFor('system'))
  // logrotate's postrotate `kill -HUP`: new files under the old names, no line lost. SIGHUP is
  // not a shutdown signal here (close-with-grace makes it one by default).
  process.on('SIGHUP', () => {
    app.reopenLogFiles()
    app.log.info('log files reopened (SIGHUP)')
  })

  // SHUTDOWN_TIMEOUT_MS bounds the whole shutdown, the delay included: past it the process exits 1.
  closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_MS, logger: app.log, skip: ['SIGHUP'] }, async ({ signal, err }) => {
    const signalled = performance.now()
    // From here readiness answers 503 and every response carries `Connection: close`.
    app.health.draining = true
    // The subscription's lease is let go now, not after the delay and the drain: another instance
    // takes over at its next attempt (a quarter of the lease) instead of waiting for it to expire.
    app.platformEvents.subscription.stop().catch(() => {})
    if (err !== undefined) {
      // After an uncaught error the process is not fit to take more requests: close at once.
      app.log.fatal({ err }, 'shutting down after an unexpected error')
    } else {
      // Serve on while the balancer's checks see readiness fail and stop sending here.
      // Why: docs/decisions/0014-graceful-shutdown.md
      app.log.info(
        { signal, delayMs: config.SHUTDOWN_DELAY_MS },
        'shutting down: readiness fails; serving until SHUTDOWN_DELAY_MS has passed, then draining; a second signal (Ctrl-C) exits at once'
      )
      await sleep(config.SHUTDOWN_DELAY_MS)
    }
    app.log.info('draining in-flight requests')
    // Node stops enforcing the receive timeouts once the listener closes: a client that never
    // finishes sending its request would hold the close until the timeout kills the process (exit
    // 1, the lease kept until it expires). Past the drain's share of the timeout, connections are cut.
    const drainLeftMs =
      config.SHUTDOWN_TIMEOUT_MS -
      Math.min(CLOSE_RESERVE_MS, config.SHUTDOWN_TIMEOUT_MS / 2) -
      (performance.now() - signalled)
    const cut = setTimeout(() => {
      app.log.warn('shutdown: requests still unfinished at the drain bound; closing their connections')
      app.server.closeAllConnections()
    }, Math.max(0, drainLeftMs))
    await app.close()
    clearTimeout(cut)
    await tracing?.shutdown(TRACE_FLUSH_MS)
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
  app.log.info({ nodeVersion: process.version }, `running on Node.js ${process.versions.node}`)
  return app
}

// Run as a program (`node dist/server.js`), not imported by another entry.
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await serve(readConfig())
}

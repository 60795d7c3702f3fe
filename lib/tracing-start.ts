import type { Tracing } from './tracing-sdk.js'
import { exportersOf, type ExporterName } from './tracing-settings.js'

export type { Tracing }

function set (value: string | undefined): boolean {
  return value !== undefined && value.trim() !== ''
}

/**
 * Where spans go (OTEL_TRACES_EXPORTER): `otlp` only while an OTLP endpoint is set, `console`
 * always, `none` nowhere.
 */
export function activeExporters (env: NodeJS.ProcessEnv): ExporterName[] {
  const endpoint = set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_ENDPOINT)
  return exportersOf(env).filter((name) => name === 'console' || (name === 'otlp' && endpoint))
}

/** Whether the OTEL_* settings ask for traces: somewhere to send them, and the SDK not disabled. */
export function tracingRequested (env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false
  return activeExporters(env).length > 0
}

/**
 * Starts OpenTelemetry when the settings ask for it. Otherwise nothing of its SDK is loaded: the
 * import is behind the check.
 */
export async function startTracing (env: NodeJS.ProcessEnv, serviceName: string): Promise<Tracing | undefined> {
  if (!tracingRequested(env)) return undefined
  const { startSdk } = await import('./tracing-sdk.js')
  return await startSdk(env, serviceName, activeExporters(env))
}

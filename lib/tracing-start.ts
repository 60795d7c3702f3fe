import type { Tracing } from './tracing-sdk.js'

export type { Tracing }

function set (value: string | undefined): boolean {
  return value !== undefined && value.trim() !== ''
}

/** Whether the OTEL_* settings ask for traces: an OTLP endpoint set, and the SDK not disabled. */
export function tracingRequested (env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false
  return set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_ENDPOINT)
}

/**
 * Starts OpenTelemetry when the settings ask for it. Otherwise nothing of its SDK is loaded: the
 * import is behind the check.
 */
export async function startTracing (env: NodeJS.ProcessEnv, serviceName: string): Promise<Tracing | undefined> {
  if (!tracingRequested(env)) return undefined
  const { startSdk } = await import('./tracing-sdk.js')
  return await startSdk(env, serviceName)
}

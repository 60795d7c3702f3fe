/*
 * The OTEL_* settings the service reads itself, or checks before the SDK reads them: the SDK falls
 * back silently (or into a diagnostic log nobody reads) on a value it does not know; here such a
 * value is a warning at start, as every other setting's is. Plain string work, loaded whether or
 * not tracing is on.
 */

/** The names in a comma-separated list setting, trimmed and lower-cased; empty when unset. */
export function listOf (value: string | undefined): string[] {
  return (value ?? '').split(',').map((name) => name.trim().toLowerCase()).filter((name) => name !== '')
}

export const EXPORTERS = ['otlp', 'console', 'none'] as const
export type ExporterName = typeof EXPORTERS[number]

export const PROPAGATOR_NAMES = ['tracecontext', 'baggage', 'none'] as const

const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio'
]

/**
 * OpenTelemetry's resource detectors, by the names OpenTelemetry JS gives them: what the resource
 * says of the process beside the service's name. `env` (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
 * is read last whatever the list, so that what an operator sets wins over what is detected.
 */
export const RESOURCE_DETECTORS = ['host', 'os', 'process', 'serviceinstance', 'env'] as const
export type ResourceDetectorName = typeof RESOURCE_DETECTORS[number]
const RESOURCE_DETECTOR_NAMES = [...RESOURCE_DETECTORS, 'all', 'none']

/**
 * The detector list setting: OTEL_RESOURCE_DETECTORS, else the name OpenTelemetry JS's Node SDK
 * reads (OTEL_NODE_RESOURCE_DETECTORS).
 */
function resourceDetectorSetting (env: NodeJS.ProcessEnv): [string, string | undefined] {
  const setting =
    ['OTEL_RESOURCE_DETECTORS', 'OTEL_NODE_RESOURCE_DETECTORS'].find((name) => listOf(env[name]).length > 0) ??
    'OTEL_RESOURCE_DETECTORS'
  return [setting, env[setting]]
}

/**
 * The detectors the setting names (default `all`); `none` leaves the service's name and OTEL_RESOURCE_ATTRIBUTES alone.
 */
export function resourceDetectorsOf (env: NodeJS.ProcessEnv): ResourceDetectorName[] {
  const names = listOf(resourceDetectorSetting(env)[1])
  if (names.length === 0 || names.includes('all')) return [...RESOURCE_DETECTORS]
  if (names.includes('none')) return ['env']
  return RESOURCE_DETECTORS.filter((name) => name === 'env' || names.includes(name))
}

/** OpenTelemetry's diagnostic levels, as OTEL_LOG_LEVEL names them. */
export const DIAGNOSTIC_LEVELS = ['none', 'error', 'warn', 'info', 'debug', 'verbose', 'all'] as const
export type DiagnosticLevel = typeof DIAGNOSTIC_LEVELS[number]

function known<T extends string> (names: readonly T[], name: string): name is T {
  return (names as readonly string[]).includes(name)
}

/** The exporters OTEL_TRACES_EXPORTER names that the service has (default `otlp`); `none` alone means no traces. */
export function exportersOf (env: NodeJS.ProcessEnv): ExporterName[] {
  const names = listOf(env.OTEL_TRACES_EXPORTER).filter((name) => known(EXPORTERS, name))
  return names.length === 0 ? ['otlp'] : [...new Set(names)]
}

/** OTEL_LOG_LEVEL, when it names a level; undefined (no diagnostics) otherwise. */
export function diagnosticLevelOf (env: NodeJS.ProcessEnv): DiagnosticLevel | undefined {
  const level = env.OTEL_LOG_LEVEL?.trim().toLowerCase() ?? ''
  return known(DIAGNOSTIC_LEVELS, level) ? level : undefined
}

/**
 * The batch span processor's settings of OpenTelemetry's environment specification, the option each
 * sets, and its default. Whole numbers, at least 1: the SDK's processor reads them itself but takes
 * any number, so that a queue size of 0 would drop every span.
 */
const BATCH_SETTINGS = {
  OTEL_BSP_SCHEDULE_DELAY: { option: 'scheduledDelayMillis', default: 5000 },
  OTEL_BSP_EXPORT_TIMEOUT: { option: 'exportTimeoutMillis', default: 30_000 },
  OTEL_BSP_MAX_QUEUE_SIZE: { option: 'maxQueueSize', default: 2048 },
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: { option: 'maxExportBatchSize', default: 512 }
} as const
type BatchSetting = keyof typeof BATCH_SETTINGS
export type BatchOptions = Partial<Record<typeof BATCH_SETTINGS[BatchSetting]['option'], number>>

function wholeNumberOf (value: string | undefined): number | undefined {
  const trimmed = value?.trim() ?? ''
  const number = Number(trimmed)
  return trimmed !== '' && Number.isSafeInteger(number) && number >= 1 ? number : undefined
}

/**
 * Every option of the batch span processor: the OTEL_BSP_* setting's value, or the default for one
 * unset or invalid (a warning at start says so). All given, the processor reads none from the environment.
 */
export function batchOptionsOf (env: NodeJS.ProcessEnv): Required<BatchOptions> {
  return Object.fromEntries(Object.entries(BATCH_SETTINGS).map(([setting, { option, default: used }]) =>
    [option, wholeNumberOf(env[setting]) ?? used])) as Required<BatchOptions>
}

function batchWarnings (env: NodeJS.ProcessEnv): string[] {
  return Object.entries(BATCH_SETTINGS).flatMap(([setting, { default: used }]) => {
    const value = env[setting]?.trim() ?? ''
    return value === '' || wholeNumberOf(value) !== undefined
      ? []
      : [`${setting}: "${value}" is not a whole number of at least 1; ${used} is used`]
  })
}

function unknownIn (setting: string, value: string | undefined, names: readonly string[], used: string): string[] {
  const unknown = listOf(value).filter((name) => !names.includes(name))
  return unknown.length === 0 ? [] : [`${setting}: ${unknown.map((name) => `"${name}"`).join(', ')} is not one of ${names.join(', ')}; ${used}`]
}

/** What is wrong with the OTEL_* settings, each a warning naming the setting and what is used instead. */
export function tracingSettingWarnings (env: NodeJS.ProcessEnv): string[] {
  const warnings = [
    ...unknownIn(
      'OTEL_TRACES_EXPORTER',
      env.OTEL_TRACES_EXPORTER,
      EXPORTERS,
      'the others are used (otlp when none is left)'
    ),
    ...unknownIn(
      'OTEL_PROPAGATORS',
      env.OTEL_PROPAGATORS,
      PROPAGATOR_NAMES,
      'the others are used (tracecontext,baggage when none is left)'
    ),
    ...unknownIn(
      ...resourceDetectorSetting(env),
      RESOURCE_DETECTOR_NAMES,
      'the others are used (nothing detected when none is left)'
    )
  ]
  const sampler = env.OTEL_TRACES_SAMPLER?.trim() ?? ''
  if (sampler !== '' && !SAMPLERS.includes(sampler)) warnings.push(`OTEL_TRACES_SAMPLER: "${sampler}" is not one of ${SAMPLERS.join(', ')}; parentbased_always_on is used`)
  const ratio = env.OTEL_TRACES_SAMPLER_ARG?.trim() ?? ''
  if (sampler.endsWith('traceidratio') && ratio !== '' && !(Number(ratio) >= 0 && Number(ratio) <= 1)) {
    warnings.push(`OTEL_TRACES_SAMPLER_ARG: "${ratio}" is not a ratio from 0 to 1; 1 is used (every trace kept)`)
  }
  const level = env.OTEL_LOG_LEVEL?.trim() ?? ''
  if (level !== '' && diagnosticLevelOf(env) === undefined) warnings.push(`OTEL_LOG_LEVEL: "${level}" is not one of ${DIAGNOSTIC_LEVELS.join(', ')}; no diagnostics are logged`)
  warnings.push(...batchWarnings(env))
  return warnings
}

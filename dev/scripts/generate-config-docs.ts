import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { KindGuard, type TObject, type TSchema } from '@sinclair/typebox'
import { UPSTREAMS } from '../../integrations/registry.js'
import { upstreamSettingNames } from '../../schemas/config.js'
import { ConfigError, SettingsSchema, loadConfig } from '../../settings.js'
import { projectRoot } from '../../lib/project-root.js'

/**
 * Writes docs/configuration.md and .env.example from the settings schema (schemas/config.ts): its
 * descriptions, defaults and bounds, and what loadConfig requires in production. With --check it
 * writes nothing and exits 1 when a checked-in file differs from what it would write.
 */

export const CONFIGURATION_DOC_FILE = 'docs/configuration.md'
export const ENV_EXAMPLE_FILE = '.env.example'

export interface Section {
  title: string
  /** What the section's settings share, when no single row can say it. */
  lead?: string
  settings: readonly string[]
}

/** The page's sections, in order: every setting of the schema belongs to exactly one. */
export const SECTIONS: readonly Section[] = [
  {
    title: 'Server',
    settings: ['NODE_ENV', 'PORT', 'HOST', 'SERVICE_NAME', 'REQUEST_RECEIVE_TIMEOUT_MS', 'TRUST_PROXY', 'PUBLIC_ORIGIN', 'CORS_ORIGIN']
  },
  {
    title: 'PostgreSQL',
    settings: ['DATABASE_URL', 'DATABASE_POOL_MAX', 'DATABASE_CONNECT_TIMEOUT_MS', 'DATABASE_QUERY_TIMEOUT_MS', 'DATABASE_MIGRATION_TIMEOUT_MS']
  },
  {
    title: 'Redis',
    lead: 'Redis holds the services cache, token revocations, rate-limit counters, the CRM daily usage, the replay position and the provisioning job queue.',
    settings: ['REDIS_URL', 'REDIS_SENTINELS', 'REDIS_SENTINEL_NAME', 'REDIS_SENTINEL_PASSWORD', 'REDIS_KEY_PREFIX', 'REDIS_COMMAND_TIMEOUT_MS', 'REDIS_ALLOW_VOLATILE']
  },
  {
    title: 'Authentication',
    settings: ['JWT_SECRET', 'ACCESS_TOKEN_TTL_SECONDS', 'SESSION_IDLE_TIMEOUT_S', 'SESSION_MAX_AGE_S', 'AUTH_BLACKLIST_FAIL_CLOSED', 'OPS_TOKEN']
  },
  {
    title: 'Sign-in through an OpenID Connect provider',
    lead: 'The browser app signs in at the provider (the billing system is one), as a confidential client with the code flow; without `OIDC_ISSUER`, with an email and password.',
    settings: ['OIDC_ISSUER', 'OIDC_CLIENT_ID', 'OIDC_CLIENT_SECRET', 'OIDC_SCOPES', 'PASSWORD_SIGN_IN']
  },
  {
    title: 'Rate limits',
    lead: 'Counted in Redis, so every instance shares them; the client address is the one `TRUST_PROXY` makes it.',
    settings: ['RATE_LIMIT_MAX', 'LOGIN_RATE_LIMIT_MAX', 'LOGIN_ACCOUNT_FAILURES_MAX', 'LOGIN_ACCOUNT_WINDOW_MS', 'TOKEN_FAILURES_MAX']
  },
  {
    title: 'Upstreams',
    lead: 'Each upstream\'s URL and credentials are given together, or, outside production, all left out for the sandbox; an upstream given in part stops the start.',
    settings: ['UPSTREAM_TIMEOUT_MS']
  },
  {
    title: 'Billing (WHMCS)',
    settings: ['BILLING_API_URL', 'BILLING_API_IDENTIFIER', 'BILLING_API_SECRET', 'BILLING_PAYMENT_METHOD']
  },
  {
    title: 'CRM (Salesforce)',
    settings: ['CRM_LOGIN_URL', 'CRM_CLIENT_ID', 'CRM_USERNAME', 'CRM_PRIVATE_KEY', 'CRM_PRIVATE_KEY_PATH', 'CRM_API_VERSION', 'CRM_DAILY_API_LIMIT', 'CRM_ORDER_ACCOUNT_ID']
  },
  {
    title: 'Telecom provider',
    settings: ['TELECOM_API_URL', 'TELECOM_API_KEY']
  },
  {
    title: 'Request queues',
    lead: 'Every billing and CRM call of an instance goes through that upstream\'s queue.',
    // Each queue's settings, as the upstream registry names them.
    settings: [...UPSTREAMS.flatMap(({ queue }) => queue === undefined ? [] : [queue.concurrency, queue.timeoutMs, queue.maxSize]), 'QUEUE_HEALTH_WINDOW_MS']
  },
  {
    title: 'Platform events',
    settings: ['CRM_EVENTS_ENABLED', 'CRM_EVENTS_REPLAY', 'CRM_EVENTS_LEASE_TTL_MS', 'CRM_EVENTS_CONNECT_MARGIN_MS']
  },
  {
    title: 'Orders: placement and reconciliation',
    settings: ['ORDERS_RECONCILE_INTERVAL_S', 'CRM_ORDER_CANCELLED_STATUSES', 'ORDERS_IDEMPOTENCY_KEY_TTL_S', 'ORDERS_PLACEMENT_RESUME_S']
  },
  {
    title: 'Provisioning jobs',
    settings: ['PROVISIONING_CONCURRENCY', 'PROVISIONING_ATTEMPTS', 'PROVISIONING_BACKOFF_MS', 'PROVISIONING_LOCK_MS']
  },
  {
    title: 'SSE streams',
    settings: ['SSE_MAX_STREAMS_PER_USER', 'SSE_MAX_STREAMS']
  },
  {
    title: 'Health checks and monitoring thresholds',
    settings: ['HEALTH_CHECK_TIMEOUT_MS', 'HEALTH_CHECK_CACHE_MS', 'INTEGRATION_CHECK_CACHE_MS', 'ORDERS_PENDING_WARNING_S', 'ORDERS_PENDING_CRITICAL_S']
  },
  {
    title: 'Logging',
    settings: ['LOG_LEVEL', 'LOG_DIR']
  },
  {
    title: 'Tracing',
    lead: 'OpenTelemetry tracing is configured by the standard `OTEL_*` variables (the last section, below); this one is the service\'s own.',
    settings: ['TRACE_PROBES']
  },
  {
    title: 'Shutdown',
    settings: ['SHUTDOWN_DELAY_MS', 'SHUTDOWN_TIMEOUT_MS']
  }
]

/**
 * The OpenTelemetry settings the service honours. Its SDK reads them, not the settings schema, so
 * they are listed here, in a section of their own; tracing is on only while an endpoint is set.
 */
export const OPENTELEMETRY_SETTINGS: ReadonlyArray<{ name: string, default: string, description: string }> = [
  { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', default: 'unset', description: 'base URL of the OTLP/HTTP collector (`/v1/traces` is added). Unset, together with `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, tracing is off (unless `OTEL_TRACES_EXPORTER` says `console`): the SDK is not loaded and nothing is traced' },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', default: 'unset', description: 'full URL traces are sent to, used as it is; wins over `OTEL_EXPORTER_OTLP_ENDPOINT`' },
  { name: 'OTEL_EXPORTER_OTLP_PROTOCOL', default: '`http/protobuf`', description: '`http/protobuf` or `http/json` (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` wins over it); `grpc` is not supported, and any other value stops the start naming the setting' },
  { name: 'OTEL_EXPORTER_OTLP_HEADERS', default: 'unset', description: 'headers of every export, `key=value` pairs separated by commas (an API key of a hosted backend); `OTEL_EXPORTER_OTLP_TRACES_HEADERS` adds to them. Never logged' },
  { name: 'OTEL_EXPORTER_OTLP_TIMEOUT', default: '`10000`', description: 'bound in ms on one export; an export that fails is dropped, never retried past it' },
  { name: 'OTEL_SERVICE_NAME', default: '`SERVICE_NAME`', description: 'the `service.name` of every span; wins over a `service.name` in `OTEL_RESOURCE_ATTRIBUTES`' },
  { name: 'OTEL_RESOURCE_ATTRIBUTES', default: 'unset', description: 'more resource attributes of every span, `key=value` pairs separated by commas (`deployment.environment.name=production,service.version=1.4.0`)' },
  { name: 'OTEL_RESOURCE_DETECTORS', default: '`all`', description: 'what every span\'s resource says of where it was made, a comma-separated list: `serviceinstance` (`service.instance.id`, a random id a process), `host` (`host.name`, `host.arch`, `host.id`), `os` (`os.type`, `os.version`), `process` (`process.pid`, `process.runtime.*`, `process.command*`, `process.owner`), `env`, `all` or `none`. `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` are read whatever the list, and win over a detected value. OpenTelemetry JS\'s `OTEL_NODE_RESOURCE_DETECTORS` is read when this is unset' },
  { name: 'OTEL_TRACES_SAMPLER', default: '`parentbased_always_on`', description: 'which traces are kept: `always_on`, `always_off`, `traceidratio`, or the `parentbased_` forms of these, which follow an incoming traceparent\'s sampled flag, and the placement\'s decision for an order\'s later work (its hand-off and job link to it)' },
  { name: 'OTEL_TRACES_SAMPLER_ARG', default: '`1.0`', description: 'the ratio of the `traceidratio` samplers, 0 to 1 (`0.1`: one trace in ten)' },
  { name: 'OTEL_TRACES_EXPORTER', default: '`otlp`', description: 'where spans go: `otlp` (while an endpoint is set), `console` (stdout, for development; tracing is on without an endpoint), or `none` (tracing off, the SDK not loaded); a comma-separated list takes several' },
  { name: 'OTEL_LOG_LEVEL', default: 'unset', description: 'the SDK\'s own diagnostics as log lines (`OpenTelemetry: …`, `correlationId: system`): `error`, `warn`, `info`, `debug`, `verbose`; unset or `none`, none are written' },
  { name: 'OTEL_PROPAGATORS', default: '`tracecontext,baggage`', description: 'how a trace is read from a request and sent on to the upstreams: `tracecontext` (W3C `traceparent` and `tracestate`), `baggage` (W3C `baggage`), or `none`' },
  { name: 'OTEL_SDK_DISABLED', default: '`false`', description: '`true` turns tracing off whatever the endpoint' },
  { name: 'OTEL_BSP_SCHEDULE_DELAY', default: '`5000`', description: 'how often in ms the spans held are exported' },
  { name: 'OTEL_BSP_MAX_QUEUE_SIZE', default: '`2048`', description: 'spans held for export at most; past it new spans are dropped rather than slow a request' },
  { name: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', default: '`512`', description: 'spans in one export at most: a batch this large is exported at once, before the delay' },
  { name: 'OTEL_BSP_EXPORT_TIMEOUT', default: '`30000`', description: 'bound in ms on the export of one batch' }
]

/**
 * What loadConfig refuses to start without in production, each as the names that satisfy it
 * (`CRM_PRIVATE_KEY or CRM_PRIVATE_KEY_PATH`). Asked of loadConfig itself, which names every missing
 * setting at once, so that the page cannot drift from it.
 */
function productionRequirements (): string[][] {
  try {
    loadConfig({ NODE_ENV: 'production' })
    return []
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    return error.problems.filter(({ problem }) => problem.startsWith('required in production')).map(({ setting }) => setting.split(' or '))
  }
}

/**
 * What loadConfig fills in outside production where production has no value or another: the
 * settings the schema requires without a default, and defaults that differ outside production.
 */
function developmentFallbacks (schema: TObject): Map<string, unknown> {
  const { config } = loadConfig({ NODE_ENV: 'development' })
  const loaded = config as unknown as Record<string, unknown>
  // Judged against the service's own schema, which loadConfig reads, whatever schema is rendered.
  const own = SettingsSchema as TObject
  const names = Object.keys(schema.properties).filter((name) => {
    const byDefault = own.properties[name]?.default
    return loaded[name] !== undefined && (byDefault === undefined ? (schema.required ?? []).includes(name) : loaded[name] !== byDefault)
  })
  return new Map(names.map((name) => [name, loaded[name]]))
}

const code = (value: unknown) => `\`${String(value)}\``
const list = (names: readonly string[]) => names.map(code).join(', ')

function unitOf (name: string): string {
  if (name.endsWith('_MS')) return ' ms'
  if (name.endsWith('_S') || name.endsWith('_SECONDS')) return ' s'
  return ''
}

function valuesCell (name: string, schema: TSchema): string {
  if (KindGuard.IsInteger(schema)) {
    const { minimum, maximum } = schema
    const bounds = minimum !== undefined && maximum !== undefined
      ? `, ${minimum} to ${maximum}`
      : minimum !== undefined ? `, at least ${minimum}` : maximum !== undefined ? `, at most ${maximum}` : ''
    return `integer${bounds}${unitOf(name)}`
  }
  if (KindGuard.IsBoolean(schema)) return list(['true', 'false'])
  if (KindGuard.IsUnion(schema) && schema.anyOf.every((member) => KindGuard.IsLiteral(member))) {
    return list(schema.anyOf.map((member) => String(member.const)))
  }
  if (KindGuard.IsString(schema)) {
    if (schema.format === 'url') return 'URL'
    if (schema.format === 'origins') return 'comma-separated origins'
    if (schema.pattern !== undefined) return `string matching ${code(schema.pattern)}`
    if (schema.minLength === 1) return 'non-empty string'
    if (schema.minLength !== undefined) return `string of at least ${schema.minLength} characters`
    return 'string'
  }
  throw new Error(`${name}: its kind of schema has no rendering in dev/scripts/generate-config-docs.ts`)
}

function defaultCell (name: string, schema: TSchema, requirement: string[] | undefined, fallback: unknown): string {
  const parts: string[] = []
  if (requirement !== undefined) {
    const others = requirement.filter((other) => other !== name)
    parts.push(others.length === 0 ? 'required in production' : `required in production (or ${list(others)})`)
  }
  if (schema.default !== undefined) {
    const byDefault = schema.default === '' ? 'empty' : code(schema.default)
    parts.push(fallback === undefined ? byDefault : `${byDefault} in production`, ...fallback === undefined ? [] : [`${code(fallback)} outside production`])
  } else if (fallback !== undefined) parts.push(`${code(fallback)} outside production`)
  else if (upstreamSettingNames(UPSTREAMS).includes(name)) parts.push('the sandbox outside production')
  else if (requirement === undefined) parts.push('unset')
  return parts.join('; ')
}

/** One table cell: one line, and a `|` of its text does not end it. */
function cell (text: string): string {
  return text.replace(/\s+/g, ' ').trim().replace(/\|/g, '\\|')
}

/** docs/configuration.md for a settings schema, grouped by sections that must name each of its settings once. */
export function renderConfigurationDoc (schema: TObject = SettingsSchema, sections: readonly Section[] = SECTIONS): string {
  const names = Object.keys(schema.properties)
  const placed = sections.flatMap((section) => section.settings)
  for (const name of placed) {
    if (!names.includes(name)) throw new Error(`The section list of dev/scripts/generate-config-docs.ts names ${name}, which the settings schema does not have`)
    if (placed.indexOf(name) !== placed.lastIndexOf(name)) throw new Error(`${name} is in more than one section of dev/scripts/generate-config-docs.ts`)
  }
  for (const name of names) {
    if (!placed.includes(name)) throw new Error(`${name} has no section: add it to one in dev/scripts/generate-config-docs.ts`)
  }

  const requirements = productionRequirements()
  const requirementOf = (name: string) => requirements.find((alternatives) => alternatives.includes(name))
  const fallbacks = developmentFallbacks(schema)

  const row = (name: string) => {
    const setting = schema.properties[name]!
    if (setting.description === undefined) throw new Error(`${name} has no description in the settings schema`)
    const cells = [code(name), defaultCell(name, setting, requirementOf(name), fallbacks.get(name)), valuesCell(name, setting), setting.description]
    return `| ${cells.map(cell).join(' | ')} |`
  }

  const lines = [
    '<!-- Generated from schemas/config.ts by dev/scripts/generate-config-docs.ts: do not edit by hand. Regenerate with `npm run docs:generate`; CI fails while this file is out of date. -->',
    '',
    '# Configuration',
    '',
    'Every setting is an environment variable, read once at start and checked against the TypeBox schema in',
    '`schemas/config.ts`: bad or missing values stop the start with one message naming every one, each with the',
    'values it takes (secret values are never echoed). A variable set to the empty string counts as unset.',
    '[`.env.example`](../.env.example) lists every setting with its default, from the same schema.',
    '',
    `In production (\`NODE_ENV=production\`) these are required: ${requirements.map((alternatives) => alternatives.map(code).join(' or ')).join(', ')}.`,
    'Every other setting is optional, in production too.',
    '',
    'Defaults are those of the schema; one marked "outside production" applies only there. Outside production',
    '`npm start` also serves every upstream whose settings are all left out from the built-in sandbox, with one',
    'warning (`UPSTREAM SANDBOX IN USE`).'
  ]
  for (const section of sections) {
    lines.push('', `## ${section.title}`, '')
    if (section.lead !== undefined) lines.push(section.lead, '')
    lines.push('| name | default | allowed values | description |', '|---|---|---|---|', ...section.settings.map(row))
  }
  lines.push('', '## OpenTelemetry (read by its SDK)', '',
    'Standard OpenTelemetry variables, read by its Node SDK rather than by the settings schema. Tracing is on while',
    '`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not',
    '`true`); what is traced and how: [operations.md](operations.md#tracing).', '',
    '| name | default | description |', '|---|---|---|',
    ...OPENTELEMETRY_SETTINGS.map((setting) => `| ${[code(setting.name), setting.default, setting.description].map(cell).join(' | ')} |`))
  return `${lines.join('\n')}\n`
}

/**
 * .env.example: every setting, by section, with its description and allowed values; those
 * production requires are left empty to fill in, the others commented out at their default.
 */
export function renderEnvExample (schema: TObject = SettingsSchema, sections: readonly Section[] = SECTIONS): string {
  const requirements = productionRequirements()
  const fallbacks = developmentFallbacks(schema)
  const lines = [
    '# Generated from schemas/config.ts by dev/scripts/generate-config-docs.ts: do not edit by hand. Regenerate with',
    '# `npm run docs:generate`; CI fails while this file is out of date. Every setting: docs/configuration.md.',
    '#',
    '# The settings of a production deployment. The service reads its environment, not this file: copy it and',
    '# give it to your process manager (docker --env-file, systemd EnvironmentFile=, a Kubernetes Secret).',
    '# Empty ones are required in production; commented ones show their default and are optional.'
  ]
  for (const section of sections) {
    lines.push('', `# ${section.title}`)
    for (const name of section.settings) {
      const setting = schema.properties[name]!
      const required = requirements.find((alternatives) => alternatives.includes(name))
      const fallback = fallbacks.get(name)
      lines.push(`# ${cell(String(setting.description))} (${valuesCell(name, setting).replace(/`/g, '')}${fallback === undefined ? '' : `; ${String(fallback)} outside production`})`)
      if (name === 'NODE_ENV') lines.push('NODE_ENV=production')
      else if (required !== undefined && required[0] === name) lines.push(`${name}=`)
      else lines.push(`#${name}=${setting.default === undefined ? '' : String(setting.default)}`)
    }
  }
  return `${lines.join('\n')}\n`
}

/** Each generated file and what it must hold. */
const GENERATED = [
  { file: CONFIGURATION_DOC_FILE, render: () => renderConfigurationDoc() },
  { file: ENV_EXAMPLE_FILE, render: () => renderEnvExample() }
]

function checkedIn (file: string): string | undefined {
  try {
    return readFileSync(join(projectRoot, file), 'utf8')
  } catch {
    return undefined
  }
}

/** The generated files that are missing or differ from what the generator writes. */
export function outOfDateFiles (): string[] {
  return GENERATED.filter(({ file, render }) => checkedIn(file) !== render()).map(({ file }) => file)
}

/** Whether a checked-in file is missing or differs from what the generator writes. */
export function outOfDate (): boolean {
  return outOfDateFiles().length > 0
}

function main (args: string[]): number {
  if (args.includes('--check')) {
    const stale = outOfDateFiles()
    if (stale.length === 0) return 0
    process.stderr.write(`${stale.join(' and ')} out of date: run npm run docs:generate\n`)
    return 1
  }
  for (const { file, render } of GENERATED) {
    writeFileSync(join(projectRoot, file), render())
    process.stdout.write(`wrote ${file}\n`)
  }
  return 0
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2))
}

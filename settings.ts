// Reading the settings: the environment converted and checked against the settings schema
// (schemas/config.ts), once, before the app is built. server.ts and the development entry use it.
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Value } from '@sinclair/typebox/value'
import { UPSTREAMS, type QueueSettingName } from './integrations/registry.js'
import { originsOf } from './lib/setting-schemas.js'
import {
  DEVELOPMENT_DEFAULTS, productionRequired, settingsSchema, upstreamSettingNames,
  type Config, type OidcSettings, type RedisSentinel, type Settings, type UpstreamSettingGroup
} from './schemas/config.js'
import {
  ConfigError, formOf, requiredInProduction, schemaProblems, type SettingProblem
} from './schemas/setting-problems.js'

/** The settings schema of the service and its upstreams. */
export const SettingsSchema = settingsSchema(UPSTREAMS)

export { ConfigError, formOf, type SettingProblem }

export interface LoadedConfig {
  config: Config
  warnings: string[]
}

/** TRUST_PROXY, unset or `false`: the socket's address; `true`: every proxy; a hop count; or the proxies' addresses. */
function trustProxyOf (value: string | undefined): Config['trustProxy'] {
  if (value === undefined || value === 'false') return false
  if (value === 'true') return true
  if (/^[0-9]+$/.test(value)) {
    // The n proxies nearest the service; the address before them is the client.
    const hops = Number(value)
    return (_address, hop) => hop < hops
  }
  const addresses = value.split(',').map((address) => address.trim()).filter((address) => address !== '')
  if (addresses.length === 0) throw new ConfigError('TRUST_PROXY', `not true, false, a hop count or a list of addresses (got '${value}')`)
  return addresses.join(',')
}

/** REDIS_SENTINELS and REDIS_SENTINEL_NAME, given together or not at all; REDIS_SENTINEL_PASSWORD only with them. */
function redisSentinelOf (
  list: string | undefined,
  name: string | undefined,
  password: string | undefined
): RedisSentinel | undefined {
  if (list === undefined && name === undefined) {
    if (password !== undefined) {
      throw new ConfigError(
        'REDIS_SENTINEL_PASSWORD',
        'set without REDIS_SENTINELS: it is the Sentinels\' password; the password of Redis itself goes in REDIS_URL'
      )
    }
    return undefined
  }
  if (list === undefined) {
    throw new ConfigError(
      'REDIS_SENTINELS',
      'required: REDIS_SENTINEL_NAME is set, and only Sentinels can say where that primary is'
    )
  }
  if (name === undefined) {
    throw new ConfigError(
      'REDIS_SENTINEL_NAME',
      'required: REDIS_SENTINELS is set, and the Sentinels are asked for the primary by its name'
    )
  }
  const entries = list.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  if (entries.length === 0) throw new ConfigError('REDIS_SENTINELS', `no host:port in it (got '${list}')`)
  const sentinels = entries.map((entry) => {
    // An IPv6 address is written in brackets, as in a URL: [::1]:26379.
    const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):([0-9]{1,5})$/.exec(entry)
    const port = Number(match?.[3])
    if (match === null || port < 1 || port > 65535) throw new ConfigError('REDIS_SENTINELS', `'${entry}' is not host:port`)
    return { host: (match[1] ?? match[2])!, port }
  })
  return { sentinels, name, password }
}

// The statuses an order goes on from: one cannot also mean that it will not.
const ORDER_GOES_ON_STATUSES = ['Pending Review', 'Activated']

function cancelledStatusesOf (list: string): string[] {
  const statuses = [...new Set(list.split(',').map((status) => status.trim()).filter((status) => status !== ''))]
  if (statuses.length === 0) throw new ConfigError('CRM_ORDER_CANCELLED_STATUSES', `no status in it (got '${list}')`)
  const goesOn = statuses.find((status) => ORDER_GOES_ON_STATUSES.includes(status))
  if (goesOn !== undefined) throw new ConfigError('CRM_ORDER_CANCELLED_STATUSES', `'${goesOn}' is a status an order goes on from, not a cancelled one`)
  return statuses
}

/** The CRM's key, given or read from its file; a problem with either is a ConfigError. */
function privateKeyOf (key: string | undefined, keyPath: string | undefined): string | undefined {
  let privateKey = key
  if (privateKey === undefined && keyPath !== undefined) {
    try {
      privateKey = readFileSync(keyPath, 'utf8')
    } catch {
      throw new ConfigError('CRM_PRIVATE_KEY_PATH', `cannot read the file '${keyPath}'`)
    }
  }
  if (privateKey !== undefined && !privateKey.includes('PRIVATE KEY-----')) {
    throw new ConfigError(key === undefined ? 'CRM_PRIVATE_KEY_PATH' : 'CRM_PRIVATE_KEY', 'not a PEM private key')
  }
  return privateKey
}

/** The OpenID Connect client: the provider and the credentials given together, or none of them. */
function oidcOf (
  issuer: string | undefined,
  clientId: string | undefined,
  clientSecret: string | undefined,
  scopes: string
): OidcSettings | undefined {
  if (issuer === undefined) {
    const stray =
      clientId === undefined ? (clientSecret === undefined ? undefined : 'OIDC_CLIENT_SECRET') : 'OIDC_CLIENT_ID'
    if (stray !== undefined) {
      throw new ConfigError(
        stray,
        'set without OIDC_ISSUER: it is a credential at the OpenID Connect provider, which OIDC_ISSUER names'
      )
    }
    return undefined
  }
  if (clientId === undefined) {
    throw new ConfigError(
      'OIDC_CLIENT_ID',
      'required: OIDC_ISSUER is set, and the provider knows the service by its client id'
    )
  }
  if (clientSecret === undefined) {
    throw new ConfigError(
      'OIDC_CLIENT_SECRET',
      'required: OIDC_ISSUER is set, and the service is a confidential client of the provider'
    )
  }
  return { issuer, clientId, clientSecret, scopes }
}

/**
 * Reads, converts and validates the settings. Throws one ConfigError naming every bad or missing
 * setting, each with the values it takes.
 */
export function loadConfig (
  env: NodeJS.ProcessEnv = process.env,
  upstreams: readonly UpstreamSettingGroup[] = UPSTREAMS
): LoadedConfig {
  const schema = upstreams === UPSTREAMS ? SettingsSchema : settingsSchema(upstreams)
  const isProduction = env.NODE_ENV === 'production'
  const given = (name: string) => env[name] !== undefined && env[name] !== ''
  const problems: SettingProblem[] = []
  /** Runs a check that throws a ConfigError, keeping its problems for the one message. */
  const checked = <T>(check: () => T): T | undefined => {
    try {
      return check()
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      problems.push(...error.problems)
      return undefined
    }
  }
  if (isProduction) {
    for (const name of productionRequired(upstreams)) {
      if (name === 'CRM_PRIVATE_KEY' ? !given(name) && !given('CRM_PRIVATE_KEY_PATH') : !given(name)) {
        problems.push({
          setting: name === 'CRM_PRIVATE_KEY' ? 'CRM_PRIVATE_KEY or CRM_PRIVATE_KEY_PATH' : name,
          problem: requiredInProduction(schema, name)
        })
      }
    }
  }
  const raw: Record<string, unknown> = {}
  for (const name of Object.keys(schema.properties)) {
    if (given(name)) raw[name] = env[name]
    else if (!isProduction && DEVELOPMENT_DEFAULTS[name] !== undefined) raw[name] = DEVELOPMENT_DEFAULTS[name]
  }
  const settings = Value.Convert(schema, Value.Default(schema, raw)) as Record<string, unknown>
  const named = new Set(problems.map(({ setting }) => setting))
  problems.push(...schemaProblems(schema, settings).filter(({ setting }) => !named.has(setting)))
  const groupSettings = new Set(upstreamSettingNames(upstreams))
  // The request queues' settings (the registry's) are the service's own, each with its default.
  const own = Object.fromEntries(Object.entries(settings).filter(([name]) => !groupSettings.has(name))) as Settings &
    Record<QueueSettingName, number>
  const {
    CRM_PRIVATE_KEY_PATH: keyPath,
    JWT_SECRET: jwtSecret,
    TRUST_PROXY: trustProxy,
    REDIS_SENTINELS: sentinels,
    REDIS_SENTINEL_NAME: sentinelName,
    REDIS_SENTINEL_PASSWORD: sentinelPassword,
    CRM_ORDER_CANCELLED_STATUSES: cancelledStatuses,
    CORS_ORIGIN: corsOrigin,
    PUBLIC_ORIGIN: publicOrigin,
    OIDC_ISSUER: issuer,
    OIDC_CLIENT_ID: clientId,
    OIDC_CLIENT_SECRET: clientSecret,
    OIDC_SCOPES: scopes,
    PASSWORD_SIGN_IN: passwordSignIn,
    ...rest
  } = own

  // The CRM's key may come from its file instead.
  const values: Record<string, unknown> = {
    ...settings,
    CRM_PRIVATE_KEY: checked(() => privateKeyOf(settings.CRM_PRIVATE_KEY as string | undefined, keyPath))
  }

  const warnings: string[] = []
  const upstreamSettings: Record<string, Record<string, unknown>> = {}
  const missingUpstreamSettings: string[] = []
  const config: Config = {
    ...rest,
    JWT_SECRET: jwtSecret ?? randomBytes(32).toString('hex'),
    trustProxy: checked(() => trustProxyOf(trustProxy)) ?? false,
    redisSentinel: checked(() => redisSentinelOf(sentinels, sentinelName, sentinelPassword)),
    crmOrderCancelledStatuses: checked(() => cancelledStatusesOf(cancelledStatuses)) ?? [],
    // Checked by the schema already: a value that is not a list of origins is named above.
    corsOrigins: originsOf(corsOrigin ?? '') ?? [],
    publicOrigins: originsOf(publicOrigin ?? '') ?? [],
    oidc: checked(() => oidcOf(issuer, clientId, clientSecret, scopes)),
    PASSWORD_SIGN_IN: passwordSignIn ?? issuer === undefined,
    isProduction,
    upstreamSettings,
    missingUpstreamSettings
  }
  for (const upstream of upstreams) {
    const names = Object.keys(upstream.settings)
    const missing = names.filter((name) => values[name] === undefined)
    missingUpstreamSettings.push(...missing)
    if (missing.length === 0) {
      upstreamSettings[upstream.name] = Object.fromEntries(names.map((name) => [name, values[name]]))
    } else if (!isProduction && missing.length < names.length) {
      // Filling in only what is missing would send the sandbox's credentials to a real system.
      // In production a missing one is named already.
      problems.push({ setting: missing[0]!, problem: `required: the other ${upstream.title} settings are given, and an upstream is configured whole or not at all` })
    }
  }
  if (rest.ORDERS_PENDING_CRITICAL_S <= rest.ORDERS_PENDING_WARNING_S) {
    problems.push({ setting: 'ORDERS_PENDING_CRITICAL_S', problem: `must be above ORDERS_PENDING_WARNING_S (${rest.ORDERS_PENDING_WARNING_S})` })
  }
  if (problems.length > 0) throw ConfigError.of(problems)
  if (isProduction && rest.OPS_TOKEN === undefined) {
    warnings.push(
      'OPS_TOKEN is not set: /metrics, /health/alerts and /status are public; set it to keep operator data from anonymous callers'
    )
  }
  if (isProduction && !rest.CRM_EVENTS_ENABLED) {
    warnings.push(`CRM_EVENTS_ENABLED is not true: no platform event is received, so the orders the CRM approves reach provisioning only through the reconciliation, which asks the CRM every ORDERS_RECONCILE_INTERVAL_S (${rest.ORDERS_RECONCILE_INTERVAL_S} s)`)
  }
  if (jwtSecret === undefined) {
    warnings.push(
      'JWT_SECRET is not set: using a random secret for this run; access tokens will not survive a restart or work across instances'
    )
  }
  return { config, warnings }
}

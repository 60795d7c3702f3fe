import { Type, type TObject, type TProperties } from '@sinclair/typebox'
import { ServiceSettingsSchema, type Settings } from './service-settings.js'

export { ServiceSettingsSchema, type Settings }

/** Where the Sentinels are, and the name they know the primary by. */
export interface RedisSentinel {
  sentinels: Array<{ host: string, port: number }>
  name: string
  /** The Sentinels' own password, when they require one. */
  password: string | undefined
}

/** The OpenID Connect provider the browsers sign in through. */
export interface OidcSettings {
  issuer: string
  clientId: string
  clientSecret: string
  scopes: string
}

export interface Config extends Omit<Settings,
  'CRM_PRIVATE_KEY_PATH' | 'JWT_SECRET' | 'TRUST_PROXY' | 'REDIS_SENTINELS' | 'REDIS_SENTINEL_NAME' |
  'REDIS_SENTINEL_PASSWORD' | 'CRM_ORDER_CANCELLED_STATUSES' | 'CORS_ORIGIN' | 'PUBLIC_ORIGIN' | 'OIDC_ISSUER' |
  'OIDC_CLIENT_ID' | 'OIDC_CLIENT_SECRET' | 'OIDC_SCOPES' | 'PASSWORD_SIGN_IN'
> {
  JWT_SECRET: string
  /** OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET and OIDC_SCOPES; unset without OIDC_ISSUER. */
  oidc: OidcSettings | undefined
  /** PASSWORD_SIGN_IN, its default resolved. */
  PASSWORD_SIGN_IN: boolean
  /** CRM_ORDER_CANCELLED_STATUSES, one Status each. */
  crmOrderCancelledStatuses: readonly string[]
  /** CORS_ORIGIN, each origin as a browser's Origin header spells it; empty when unset. */
  corsOrigins: readonly string[]
  /** PUBLIC_ORIGIN, the same way. */
  publicOrigins: readonly string[]
  /** TRUST_PROXY as Fastify's `trustProxy` option takes it. */
  trustProxy: boolean | string | ((address: string, hop: number) => boolean)
  /** REDIS_SENTINELS, REDIS_SENTINEL_NAME and REDIS_SENTINEL_PASSWORD; unset, REDIS_URL's host is Redis. */
  redisSentinel: RedisSentinel | undefined
  isProduction: boolean
  /** Each upstream's settings group, under the upstream's name; one not given is missing. */
  upstreamSettings: Readonly<Record<string, Readonly<Record<string, unknown>>>>
  /** Upstream settings that were not given; outside production the sandbox fills them in. */
  missingUpstreamSettings: string[]
}

/** An upstream as the settings know it (the upstream registry's descriptors are these). */
export interface UpstreamSettingGroup {
  name: string
  /** How a message names the upstream: `CRM`. */
  title: string
  /** Its settings group: given together, or (outside production) none, for the sandbox to fill in. */
  settings: TProperties
  /** Its request queue's settings, each with its default. */
  queue?: { schemas: TProperties } | undefined
}

/**
 * The settings schema of the service with these upstreams: its own settings, then each request
 * queue's, then each upstream's group.
 */
export function settingsSchema (
  upstreams: readonly UpstreamSettingGroup[]
): TObject<typeof ServiceSettingsSchema.properties & TProperties> {
  const queues = upstreams.flatMap(({ queue }) => Object.entries(queue?.schemas ?? {}))
  const groups = upstreams.flatMap(({ settings }) =>
    Object.entries(settings).map(([name, schema]) => [name, Type.Optional(schema)])
  )
  return Type.Object({
    ...ServiceSettingsSchema.properties,
    ...(Object.fromEntries(queues) as TProperties),
    ...(Object.fromEntries(groups) as TProperties)
  })
}

/** Every upstream setting, upstream by upstream. */
export function upstreamSettingNames (upstreams: readonly UpstreamSettingGroup[]): string[] {
  return upstreams.flatMap(({ settings }) => Object.keys(settings))
}

/** What production does not start without. */
export function productionRequired (upstreams: readonly UpstreamSettingGroup[]): string[] {
  return ['DATABASE_URL', 'REDIS_URL', ...upstreamSettingNames(upstreams), 'JWT_SECRET']
}

/** What a development run takes for a setting it is not given. */
export const DEVELOPMENT_DEFAULTS: Record<string, string> = {
  DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres',
  REDIS_URL: 'redis://127.0.0.1:6379',
  // No balancer to wait for: Ctrl-C stops a development run at once.
  SHUTDOWN_DELAY_MS: '0'
}

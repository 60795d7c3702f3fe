import { Secret, Url } from '../lib/setting-schemas.js'
import { BillingClient } from './billing/client.js'
import { CrmClient } from './crm/client.js'
import type { DailyUsageStore } from './crm/daily-usage.js'
import { defineUpstream, type ClientOf } from './descriptor.js'
import { TelecomClient } from './telecom/client.js'
import type { UpstreamOptions } from './upstream.js'

const billing = defineUpstream({
  name: 'billing',
  title: 'billing',
  description: 'billing system',
  settings: {
    BILLING_API_URL: Url('WHMCS includes/api.php URL'),
    BILLING_API_IDENTIFIER: Secret('WHMCS API identifier'),
    BILLING_API_SECRET: Secret('WHMCS API secret')
  },
  queue: { concurrency: 'BILLING_QUEUE_CONCURRENCY', timeoutMs: 'BILLING_QUEUE_TIMEOUT_MS', maxSize: 'BILLING_QUEUE_MAX_SIZE' },
  client: (settings, { config, ...options }: UpstreamOptions & { config: { BILLING_PAYMENT_METHOD?: string | undefined } }) => new BillingClient({
    ...options,
    url: settings.BILLING_API_URL,
    identifier: settings.BILLING_API_IDENTIFIER,
    secret: settings.BILLING_API_SECRET,
    defaultPaymentMethod: config.BILLING_PAYMENT_METHOD
  }),
  health: (client, signal) => client.health(signal)
})

const crm = defineUpstream({
  name: 'crm',
  title: 'CRM',
  description: 'CRM',
  settings: {
    CRM_LOGIN_URL: Url('Salesforce OAuth server'),
    CRM_CLIENT_ID: Secret('connected app consumer key'),
    CRM_USERNAME: Secret('integration user'),
    CRM_PRIVATE_KEY: Secret('PEM RSA key for the JWT assertion')
  },
  queue: { concurrency: 'CRM_QUEUE_CONCURRENCY', timeoutMs: 'CRM_QUEUE_TIMEOUT_MS', maxSize: 'CRM_QUEUE_MAX_SIZE' },
  client: (settings, { config, crmUsage, ...options }: UpstreamOptions & { config: { CRM_API_VERSION: string }, crmUsage: DailyUsageStore }) => new CrmClient({
    ...options,
    loginUrl: settings.CRM_LOGIN_URL,
    clientId: settings.CRM_CLIENT_ID,
    username: settings.CRM_USERNAME,
    privateKey: settings.CRM_PRIVATE_KEY,
    apiVersion: config.CRM_API_VERSION,
    usage: crmUsage
  }),
  health: (client, signal) => client.health(signal)
})

const telecom = defineUpstream({
  name: 'telecom',
  title: 'telecom',
  description: 'telecom provider',
  settings: {
    TELECOM_API_URL: Url('telecom provider base URL'),
    TELECOM_API_KEY: Secret('telecom provider API key')
  },
  client: (settings, options) => new TelecomClient({ ...options, url: settings.TELECOM_API_URL, apiKey: settings.TELECOM_API_KEY }),
  health: (client, signal) => client.health(signal)
})

/** The upstreams of the service, in the order every list of them follows. */
export const UPSTREAMS = [billing, crm, telecom] as const

export type ProductUpstream = typeof UPSTREAMS[number]
export type UpstreamName = ProductUpstream['name']

/** Each upstream's client, under the upstream's name. */
export type UpstreamClients = { readonly [Upstream in ProductUpstream as Upstream['name']]: ClientOf<Upstream> }

import { Secret, Url } from '../lib/setting-schemas.js'
import { BillingClient } from './billing/client.js'
import { CrmClient } from './crm/client.js'
import type { DailyUsageStore } from './crm/daily-usage.js'
import { defineUpstream, requestQueue, type QueueDescriptor } from './descriptor.js'
import { TelecomClient } from './telecom/client.js'
import type { UpstreamOptions } from './upstream.js'

/** The limits the specification states for the billing queue (§8). */
const BILLING_QUEUE_LIMITS: QueueDescriptor['limits'] = {
  queueSize: { warning: 10, critical: 50, priority: { warning: 'P4', critical: 'P3' } },
  failedRequests: { warning: 5, critical: 20, priority: { warning: 'P4', critical: 'P2' } }
}

/**
 * The CRM queue, whose measures have the same shape, is held to the same limits. Its failures
 * open a ticket: what they stop (placing and provisioning orders) pages through the orders' rows.
 */
const CRM_QUEUE_LIMITS: QueueDescriptor['limits'] = {
  queueSize: BILLING_QUEUE_LIMITS.queueSize,
  failedRequests: { ...BILLING_QUEUE_LIMITS.failedRequests, priority: { warning: 'P4', critical: 'P3' } }
}

const WAITING =
  'requests that may wait for a slot; one more is refused at once (0: a request runs at once or is refused)'

const billing = defineUpstream({
  name: 'billing',
  title: 'billing',
  description: 'billing system',
  settings: {
    BILLING_API_URL: Url('WHMCS includes/api.php URL'),
    BILLING_API_IDENTIFIER: Secret('WHMCS API identifier'),
    BILLING_API_SECRET: Secret('WHMCS API secret')
  },
  queue: requestQueue({
    concurrency: {
      setting: 'BILLING_QUEUE_CONCURRENCY',
      maximum: 200,
      default: 10,
      description: 'billing requests in flight at once on one instance; the others wait in the queue'
    },
    timeoutMs: {
      setting: 'BILLING_QUEUE_TIMEOUT_MS',
      default: 8000,
      description: 'deadline of one billing request, waiting included'
    },
    maxSize: { setting: 'BILLING_QUEUE_MAX_SIZE', default: 100, description: `billing ${WAITING}` },
    limits: BILLING_QUEUE_LIMITS
  }),
  client: (
    settings,
    { config, ...options }: UpstreamOptions & { config: { BILLING_PAYMENT_METHOD?: string | undefined } }
  ) => new BillingClient({
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
  queue: requestQueue({
    concurrency: {
      setting: 'CRM_QUEUE_CONCURRENCY',
      maximum: 25,
      default: 5,
      description: 'CRM requests in flight at once on one instance, and platform events handed off at once; the others wait'
    },
    timeoutMs: {
      setting: 'CRM_QUEUE_TIMEOUT_MS',
      default: 15_000,
      description: 'deadline of one CRM request, waiting included'
    },
    maxSize: { setting: 'CRM_QUEUE_MAX_SIZE', default: 200, description: `CRM ${WAITING}` },
    limits: CRM_QUEUE_LIMITS
  }),
  client: (
    settings,
    {
      config,
      crmUsage,
      ...options
    }: UpstreamOptions & { config: { CRM_API_VERSION: string }, crmUsage: DailyUsageStore }
  ) => new CrmClient({
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
  responseTime: { warning: 3000, critical: 10_000, priority: { warning: 'P4', critical: 'P3' } },
  client: (settings, options) =>
    new TelecomClient({ ...options, url: settings.TELECOM_API_URL, apiKey: settings.TELECOM_API_KEY }),
  health: (client, signal) => client.health(signal)
})

/** The upstreams of the service, in the order every list of them follows. */
export const UPSTREAMS = [billing, crm, telecom] as const

export type ProductUpstream = typeof UPSTREAMS[number]
export type UpstreamName = ProductUpstream['name']

/** The upstreams whose calls wait in a request queue. */
export type QueuedUpstream = Extract<ProductUpstream, { queue: object }>

/** The settings of the request queues, as the environment spells them: `BILLING_QUEUE_CONCURRENCY`. */
export type QueueSettingName = QueuedUpstream['queue'][keyof QueuedUpstream['queue'] &
  ('concurrency' | 'timeoutMs' | 'maxSize')]

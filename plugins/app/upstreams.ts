import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { BillingClient } from '../../integrations/billing/client.js'
import { CrmClient } from '../../integrations/crm/client.js'
import { DailyUsageStore, type DailyUsage, type LimitSource } from '../../integrations/crm/daily-usage.js'
import { TelecomClient } from '../../integrations/telecom/client.js'
import type { UpstreamCall, UpstreamName } from '../../integrations/upstream.js'
import { percentOf } from '../../lib/numbers.js'
import { SlidingWindow, type WindowSummary } from '../../lib/sliding-window.js'
import { combinedFailureRate, highest, windowed, type Reading } from './monitoring/alerts.js'
import type { MonitoringSource } from './monitoring/index.js'
import { threshold } from './monitoring/thresholds.js'
import { crmDailyUsageKey } from './redis-keys.js'

declare module 'fastify' {
  interface FastifyInstance {
    billing: BillingClient
    crm: CrmClient
    telecom: TelecomClient
    /** The CRM's daily API usage, one figure for every instance. */
    crmUsage: DailyUsageStore
    /** Every upstream call's duration and outcome, over the recent window. */
    upstreamCalls: Record<UpstreamName, SlidingWindow>
  }
}

/**
 * The slower of several upstreams' p95, each judged only on enough calls of its own: a few slow
 * calls to one upstream must not stand for it while the other has plenty.
 */
function slowest (windows: WindowSummary[], what: string): Reading {
  const { minSamples } = threshold('crm_billing_response_time')
  const known = windows.filter((window) => window.p95 !== null)
  const judged = known.filter((window) => window.count >= (minSamples ?? 0))
  const pool = judged.length > 0 ? judged : known
  const value = highest(pool.map((window) => window.p95))
  return windowed(value, Math.max(0, ...pool.map((window) => window.count)), what)
}

/** The CRM's daily API usage as the health endpoints report it: `used` counts against `limit`. */
export interface CrmUsageReport {
  used: number
  limit: number | null
  percent: number | null
  limitSource: LimitSource
}

export function usageReport ({ used, limit, limitSource }: DailyUsage): CrmUsageReport {
  return { used: used ?? 0, limit, percent: percentOf(used ?? 0, limit), limitSource }
}

declare module './monitoring/index.js' {
  interface MonitoringParts {
    /** Every upstream call's duration and outcome over the recent window. */
    upstreams: Record<UpstreamName, WindowSummary>
    crmUsage: CrmUsageReport
  }
}

function required (value: string | undefined, name: string): string {
  if (value === undefined) throw new Error(`${name} is not set (outside production, \`npm start\` fills unset upstreams with the development sandbox)`)
  return value
}

/** Every upstream call's duration and outcome over the recent window, judged on response times and errors. */
function upstreamCallsPart (upstreamCalls: Record<UpstreamName, SlidingWindow>): MonitoringSource<Record<UpstreamName, WindowSummary>> {
  return {
    description: 'the upstream calls',
    read: () => ({ billing: upstreamCalls.billing.summary(), crm: upstreamCalls.crm.summary(), telecom: upstreamCalls.telecom.summary() }),
    measures: {
      crm_billing_response_time: (calls) => slowest([calls.crm, calls.billing], 'CRM or billing calls'),
      telecom_response_time: ({ telecom }) => windowed(telecom.p95, telecom.count, 'telecom calls'),
      external_error_rate: (calls) => {
        const windows = Object.values(calls)
        return windowed(combinedFailureRate(windows), windows.reduce((sum, window) => sum + window.count, 0), 'upstream calls')
      }
    }
  }
}

/** The CRM's daily API usage against its quota. */
function crmUsagePart (crmUsage: DailyUsageStore): MonitoringSource<CrmUsageReport> {
  return {
    description: 'the CRM daily usage store',
    read: async () => usageReport(await crmUsage.read()),
    measures: {
      crm_daily_usage: ({ used, limit }) => limit === null || limit === 0
        ? { value: null, note: 'no data: neither the CRM nor CRM_DAILY_API_LIMIT has given a limit' }
        : { value: (100 * used) / limit }
    },
    metrics: [
      { name: 'portal_bff_crm_daily_api_requests', help: 'CRM API requests of the last 24 hours, as the CRM reports them', type: 'gauge', samples: (usage) => [{ value: usage.used }] },
      { name: 'portal_bff_crm_daily_api_limit', help: 'The CRM daily API quota; absent while unknown', type: 'gauge', samples: (usage) => usage.limit === null ? [] : [{ value: usage.limit }] }
    ]
  }
}

async function upstreams (fastify: FastifyInstance) {
  const { config } = fastify
  const upstreamCalls: Record<UpstreamName, SlidingWindow> = { billing: new SlidingWindow(), crm: new SlidingWindow(), telecom: new SlidingWindow() }
  const common = {
    timeoutMs: config.UPSTREAM_TIMEOUT_MS,
    onCall: (call: UpstreamCall) => { upstreamCalls[call.upstream].record(call.durationMs, call.outcome !== 'ok'); fastify.metrics.observeUpstreamCall(call) },
    log: fastify.log
  }
  const crmUsage = new DailyUsageStore({ redis: fastify.redis, key: crmDailyUsageKey(config.REDIS_KEY_PREFIX), fallbackLimit: config.CRM_DAILY_API_LIMIT, log: fastify.log })
  const billing = new BillingClient({
    ...common,
    url: required(config.BILLING_API_URL, 'BILLING_API_URL'),
    identifier: required(config.BILLING_API_IDENTIFIER, 'BILLING_API_IDENTIFIER'),
    secret: required(config.BILLING_API_SECRET, 'BILLING_API_SECRET'),
    defaultPaymentMethod: config.BILLING_PAYMENT_METHOD
  })
  const crm = new CrmClient({
    ...common,
    loginUrl: required(config.CRM_LOGIN_URL, 'CRM_LOGIN_URL'),
    clientId: required(config.CRM_CLIENT_ID, 'CRM_CLIENT_ID'),
    username: required(config.CRM_USERNAME, 'CRM_USERNAME'),
    privateKey: required(config.CRM_PRIVATE_KEY, 'CRM_PRIVATE_KEY'),
    apiVersion: config.CRM_API_VERSION,
    usage: crmUsage
  })
  const telecom = new TelecomClient({
    ...common,
    url: required(config.TELECOM_API_URL, 'TELECOM_API_URL'),
    apiKey: required(config.TELECOM_API_KEY, 'TELECOM_API_KEY')
  })

  fastify.decorate('billing', billing)
  fastify.decorate('crm', crm)
  fastify.decorate('telecom', telecom)
  fastify.decorate('crmUsage', crmUsage)
  fastify.decorate('upstreamCalls', upstreamCalls)

  fastify.integrationHealth.register('billing', (signal) => billing.health(signal))
  fastify.integrationHealth.register('crm', (signal) => crm.health(signal))
  fastify.integrationHealth.register('telecom', (signal) => telecom.health(signal))

  fastify.monitoring.register('upstreams', upstreamCallsPart(upstreamCalls))
  fastify.monitoring.register('crmUsage', crmUsagePart(crmUsage))

  crm.startLimitsRefresh()
  fastify.addHook('onClose', async () => {
    await Promise.all([billing.close(), crm.close(), telecom.close()])
  })
}

export default fp(upstreams, { name: 'upstreams', fastify: '5.x', dependencies: ['redis', 'health', 'monitoring'] })

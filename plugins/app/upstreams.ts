import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { DailyUsageStore, type DailyUsage, type LimitSource } from '../../integrations/crm/daily-usage.js'
import type { UpstreamClient, UpstreamDescriptor } from '../../integrations/descriptor.js'
import type { UpstreamClients, UpstreamName } from '../../integrations/registry.js'
import type { UpstreamCall } from '../../integrations/upstream.js'
import { percentOf } from '../../lib/numbers.js'
import { SlidingWindow, type WindowSummary } from '../../lib/sliding-window.js'
import type { Config } from '../../schemas/config.js'
import { HISTOGRAMS } from './monitoring/metrics.js'
import { combinedFailureRate, highest, windowed, type Reading } from './monitoring/alerts.js'
import type { MonitoringSource } from './monitoring/index.js'
import { ROWS, threshold, type MeasureName } from './monitoring/thresholds.js'
import { crmDailyUsageKey } from './redis-keys.js'
import { asProbe, LastCalls } from './last-calls.js'

/**
 * An upstream the service can run: what its client needs of the service, the service has. Its
 * queue's settings join the settings schema made from the same registry.
 */
export type ServiceUpstream = UpstreamDescriptor<string, UpstreamClient, { config: Config, crmUsage: DailyUsageStore }>

export interface UpstreamsOptions {
  /** The upstream registry: the product's, or a test's. */
  upstreams: readonly ServiceUpstream[]
}

declare module 'fastify' {
  interface FastifyInstance extends UpstreamClients {
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

/** An upstream's settings group, or the error naming its first setting not given. */
function settingsOf (config: Config, upstream: ServiceUpstream): Readonly<Record<string, unknown>> {
  const settings = config.upstreamSettings[upstream.name]
  if (settings !== undefined) return settings
  const names = Object.keys(upstream.settings)
  const name = names.find((each) => config.missingUpstreamSettings.includes(each)) ?? names[0]
  throw new Error(`${String(name)} is not set (outside production, \`npm start\` fills unset upstreams with the development sandbox)`)
}

type CallReadings = Partial<Record<MeasureName, (calls: Record<string, WindowSummary>) => Reading>>

/**
 * The rows of the thresholds table that judge one upstream's response time (a percentile of the
 * upstream call histogram of that upstream alone), each read from that upstream's call window.
 */
function responseTimeReadings (): CallReadings {
  const readings: CallReadings = {}
  for (const { measure, prometheus } of ROWS) {
    if (prometheus.kind !== 'quantile' || prometheus.histogram !== HISTOGRAMS.upstream.name) continue
    const upstream = prometheus.match?.upstream
    if (typeof upstream !== 'string') continue
    readings[measure as MeasureName] = (calls) => windowed(calls[upstream]?.p95 ?? null, calls[upstream]?.count ?? 0, `${upstream} calls`)
  }
  return readings
}

/** Every upstream call's duration and outcome over the recent window, judged on response times and errors. */
function upstreamCallsPart (upstreamCalls: Record<UpstreamName, SlidingWindow>): MonitoringSource<Record<UpstreamName, WindowSummary>> {
  return {
    description: 'the upstream calls',
    read: () => Object.fromEntries(Object.entries(upstreamCalls).map(([name, window]) => [name, window.summary()])) as Record<UpstreamName, WindowSummary>,
    measures: {
      crm_billing_response_time: (calls) => slowest([calls.crm, calls.billing], 'CRM or billing calls'),
      ...responseTimeReadings(),
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

async function upstreams (fastify: FastifyInstance, { upstreams }: UpstreamsOptions) {
  const { config } = fastify
  const upstreamCalls = Object.fromEntries(upstreams.map(({ name }) => [name, new SlidingWindow()])) as Record<UpstreamName, SlidingWindow>
  const lastCalls = new Map(upstreams.map(({ name }) => [name, new LastCalls()]))
  const common = {
    timeoutMs: config.UPSTREAM_TIMEOUT_MS,
    onCall: (call: UpstreamCall) => {
      upstreamCalls[call.upstream as UpstreamName].record(call.durationMs, call.outcome !== 'ok')
      lastCalls.get(call.upstream)?.record(call.outcome)
      fastify.metrics.observeUpstreamCall(call)
    },
    log: fastify.log
  }
  const crmUsage = new DailyUsageStore({ redis: fastify.redis, key: crmDailyUsageKey(config.REDIS_KEY_PREFIX), fallbackLimit: config.CRM_DAILY_API_LIMIT, log: fastify.log })
  const clients = upstreams.map((upstream) => ({ upstream, client: upstream.client(settingsOf(config, upstream), { ...common, config, crmUsage }) }))

  fastify.decorate('crmUsage', crmUsage)
  fastify.decorate('upstreamCalls', upstreamCalls)
  for (const { upstream, client } of clients) {
    fastify.decorate(upstream.name, client)
    // Failing when its probe fails, or when the last calls the service made failed (contract §10a).
    fastify.health.integrations.register(upstream.name, async (signal) => {
      await asProbe(() => upstream.health(client, signal))
      const failing = lastCalls.get(upstream.name)?.failing(upstream.name)
      if (failing !== undefined) throw failing
    })
    fastify.metrics.knowUpstream(upstream.name)
  }

  fastify.monitoring.register('upstreams', upstreamCallsPart(upstreamCalls))
  fastify.monitoring.register('crmUsage', crmUsagePart(crmUsage))

  // Its timer's calls are probes too: started within one, they carry its mark.
  asProbe(() => fastify.crm.startLimitsRefresh())
  fastify.addHook('onClose', async () => {
    await Promise.all(clients.map(({ client }) => client.close()))
  })
}

export default fp(upstreams, { name: 'upstreams', fastify: '5.x', dependencies: ['redis', 'health', 'monitoring'] })

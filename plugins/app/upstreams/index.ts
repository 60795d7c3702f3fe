import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { DailyUsageStore } from '../../../integrations/crm/daily-usage.js'
import type { ClientOf, UpstreamClient, UpstreamDescriptor } from '../../../integrations/descriptor.js'
import type { ProductUpstream, QueuedUpstream } from '../../../integrations/registry.js'
import type { UpstreamCall } from '../../../integrations/upstream.js'
import { SlidingWindow } from '../../../lib/sliding-window.js'
import type { Config } from '../../../schemas/config.js'
import { crmDailyUsageKey } from '../redis-keys.js'
import { callsPart } from './calls.js'
import { crmUsagePart } from './crm-usage.js'
import { asProbe, LastCalls } from './last-calls.js'
import { queueOf, queuesPart, type UpstreamQueue } from './queues.js'

/**
 * An upstream the service can run: what its client needs of the service, the service has. Its
 * queue's settings join the settings schema made from the same registry.
 */
export type ServiceUpstream = UpstreamDescriptor<string, UpstreamClient, { config: Config, crmUsage: DailyUsageStore }>

export interface UpstreamsOptions {
  /** The upstream registry: the product's, or a test's. */
  upstreams: readonly ServiceUpstream[]
}

/** What the service holds of one upstream. */
export interface UpstreamParts<Client = UpstreamClient> {
  readonly client: Client
  /** Its calls' durations and outcomes over the recent window. */
  readonly calls: SlidingWindow
  /** Its request queue, when its descriptor gives it one: every call of a request goes through it. */
  readonly queue?: UpstreamQueue
}

type PartsOf<Upstream> = UpstreamParts<ClientOf<Upstream>> &
  (Upstream extends QueuedUpstream ? { readonly queue: UpstreamQueue } : unknown)

/**
 * Each upstream of the registry under its name; the CRM's with the org's daily API usage, one figure for
 * every instance.
 */
export type Upstreams = { readonly [Upstream in ProductUpstream as Upstream['name']]: PartsOf<Upstream> } & {
  readonly crm: { readonly dailyUsage: DailyUsageStore }
}

declare module 'fastify' {
  interface FastifyInstance {
    upstreams: Upstreams
  }
}

/** The parts of an upstream named by a registry (the product's or a test's), whose names the type does not know. */
export function upstreamNamed (upstreams: Upstreams, name: string): UpstreamParts | undefined {
  return (upstreams as unknown as Partial<Record<string, UpstreamParts>>)[name]
}

/** An upstream's settings group, or the error naming its first setting not given. */
function settingsOf (config: Config, upstream: ServiceUpstream): Readonly<Record<string, unknown>> {
  const settings = config.upstreamSettings[upstream.name]
  if (settings !== undefined) return settings
  const names = Object.keys(upstream.settings)
  const name = names.find((each) => config.missingUpstreamSettings.includes(each)) ?? names[0]
  throw new Error(`${String(name)} is not set (outside production, \`npm start\` fills unset upstreams with the development sandbox)`)
}

async function upstreams (fastify: FastifyInstance, { upstreams }: UpstreamsOptions) {
  const { config } = fastify
  const calls = new Map(upstreams.map(({ name }) => [name, new SlidingWindow()]))
  const lastCalls = new Map(upstreams.map(({ name }) => [name, new LastCalls()]))
  const common = {
    timeoutMs: config.UPSTREAM_TIMEOUT_MS,
    onCall: (call: UpstreamCall) => {
      calls.get(call.upstream)?.record(call.durationMs, call.outcome !== 'ok')
      lastCalls.get(call.upstream)?.record(call.outcome)
      fastify.metrics.observeUpstreamCall(call)
    },
    log: fastify.log
  }
  const dailyUsage = new DailyUsageStore({
    redis: fastify.redis,
    key: crmDailyUsageKey(config.REDIS_KEY_PREFIX),
    fallbackLimit: config.CRM_DAILY_API_LIMIT,
    log: fastify.log
  })
  const held = upstreams.map((upstream) => {
    const client = upstream.client(settingsOf(config, upstream), { ...common, config, crmUsage: dailyUsage })
    const queue = queueOf(upstream, config)
    return { upstream, parts: { client, calls: calls.get(upstream.name)!, ...(queue !== undefined && { queue }) } }
  })
  const parts = Object.fromEntries(held.map(({ upstream, parts }) => [upstream.name, parts]))
  // Typed by the product's registry; a test's adds upstreams, which upstreamNamed reads.
  fastify.decorate('upstreams', { ...parts, crm: { ...parts.crm, dailyUsage } } as unknown as Upstreams)

  for (const { upstream, parts: { client } } of held) {
    // Failing when its probe fails, or when the last calls the service made failed (contract §10a).
    fastify.health.integrations.register(upstream.name, async (signal) => {
      await asProbe(() => upstream.health(client, signal))
      const failing = lastCalls.get(upstream.name)?.failing(upstream.name)
      if (failing !== undefined) throw failing
    })
    fastify.metrics.knowUpstream(upstream.name)
  }
  const queues = held.flatMap(({ parts }) => parts.queue ?? [])
  fastify.monitoring.register('queues', queuesPart(queues))
  fastify.monitoring.register('upstreams', callsPart(calls))
  fastify.monitoring.register('crmUsage', crmUsagePart(dailyUsage))

  // Its timer's calls are probes too: started within one, they carry its mark.
  asProbe(() => fastify.upstreams.crm.client.startLimitsRefresh())
  // The queues drain first: their calls need the clients open.
  fastify.addHook('onClose', async () => {
    await Promise.all(queues.map((queue) => queue.drain()))
    await Promise.all(held.map(({ parts }) => parts.client.close()))
  })
}

export default fp(upstreams, {
  name: 'upstreams',
  fastify: '5.x',
  dependencies: ['redis', 'health', 'monitoring'],
  decorators: { fastify: ['config'] }
})

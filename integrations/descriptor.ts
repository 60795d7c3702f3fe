import { Type, type Static, type TObject, type TProperties } from '@sinclair/typebox'
import { Milliseconds } from '../lib/setting-schemas.js'
import type { UpstreamOptions } from './upstream.js'

/** What the service asks of every client: to be closed at shutdown. */
export interface UpstreamClient {
  close (): Promise<void>
}

/** The settings of an upstream's request queue, each named as the settings schema names it. */
export interface QueueSettings<Setting extends string = string> {
  concurrency: Setting
  timeoutMs: Setting
  maxSize: Setting
}

/** The incident priorities of the specification (§8) a level routes to: P1 and P2 page, P3 and P4 open a ticket. */
export type IncidentPriority = 'P1' | 'P2' | 'P3' | 'P4'

/**
 * The limits of one of an upstream's measures and the priorities its levels route to: the
 * monitoring makes a row of its thresholds table of them, and judges the measure by it alone.
 */
export interface UpstreamLimits {
  warning: number
  critical: number
  priority: { warning: IncidentPriority, critical: IncidentPriority }
}

/**
 * An upstream's request queue: its settings (their names, and their schemas under those names,
 * which the settings schema takes in), and the limits of its two measures, the requests waiting
 * (`<name>_queue_size`) and those failed within QUEUE_HEALTH_WINDOW_MS (`<name>_failed_requests`).
 */
export interface QueueDescriptor<Setting extends string = string> extends QueueSettings<Setting> {
  readonly schemas: TProperties
  readonly limits: { queueSize: UpstreamLimits, failedRequests: UpstreamLimits }
}

interface QueueSetting<Setting extends string> {
  setting: Setting
  default: number
  description: string
}

/** A request queue's descriptor, its settings' schemas made from their defaults and descriptions. */
export function requestQueue<
  const Concurrency extends string,
  const Timeout extends string,
  const MaxSize extends string
> (queue: {
  /** Calls in flight at once on one instance, at most `maximum`. */
  concurrency: QueueSetting<Concurrency> & { maximum: number }
  /** One call's deadline, waiting included. */
  timeoutMs: QueueSetting<Timeout>
  /** Calls that may wait for a slot. */
  maxSize: QueueSetting<MaxSize>
  limits: QueueDescriptor['limits']
}): QueueDescriptor<Concurrency | Timeout | MaxSize> {
  const { concurrency, timeoutMs, maxSize, limits } = queue
  return {
    concurrency: concurrency.setting,
    timeoutMs: timeoutMs.setting,
    maxSize: maxSize.setting,
    schemas: {
      [concurrency.setting]: Type.Integer({
        minimum: 1,
        maximum: concurrency.maximum,
        default: concurrency.default,
        description: concurrency.description
      }),
      [timeoutMs.setting]: Milliseconds(timeoutMs.default, timeoutMs.description),
      [maxSize.setting]: Type.Integer({
        minimum: 0,
        maximum: 100_000,
        default: maxSize.default,
        description: maxSize.description
      })
    },
    limits
  }
}

/**
 * Everything the service knows of one upstream. The registry (registry.ts) lists them; the
 * `upstreams` decorator (each one's client, call window and queue), the metric label sets, the
 * settings and the integration health check are made from that list.
 *
 * `Lent`: what the client needs of the service besides its settings group (other settings, a store
 * the service shares); the service checks that it has it.
 */
export interface UpstreamDescriptor<
  Name extends string = string,
  Client extends UpstreamClient = UpstreamClient,
  Lent = unknown
> {
  /** The one name of the upstream: its key in the `upstreams` decorator, its health check, its metric label. */
  readonly name: Name
  /** How a sentence names it: `CRM`. */
  readonly title: string
  /** What it is, as the API documentation names it: `telecom provider`. */
  readonly description: string
  /**
   * Its settings group, as the environment spells the settings: its URL and credentials, given
   * together, or outside production none, for the sandbox to fill in.
   */
  readonly settings: TProperties
  /** Its request queue, when its calls wait in one. */
  readonly queue?: QueueDescriptor | undefined
  /**
   * The limits of its response time (the 95th percentile of its calls over 5 minutes), when it is
   * judged alone: the row `<name>_response_time`.
   */
  readonly responseTime?: UpstreamLimits | undefined
  /** Its client, from its settings group (checked against `settings`). */
  client (settings: Readonly<Record<string, unknown>>, context: UpstreamOptions & Lent): Client
  /** Resolves while the upstream answers; rejects with the failure otherwise. */
  health (client: Client, signal: AbortSignal): Promise<void>
}

/**
 * A descriptor whose client reads its settings group as the group's schemas type it. The types of
 * its name, queue and response-time limits stay those written, for the types made from the registry.
 */
export function defineUpstream<
  const Name extends string,
  const Settings extends TProperties,
  Client extends UpstreamClient,
  const Queue extends QueueDescriptor | undefined = undefined,
  const ResponseTime extends UpstreamLimits | undefined = undefined,
  Lent = unknown
> (descriptor: {
  name: Name
  title: string
  description: string
  settings: Settings
  queue?: Queue
  responseTime?: ResponseTime
  client (settings: Static<TObject<Settings>>, context: UpstreamOptions & Lent): Client
  health (client: Client, signal: AbortSignal): Promise<void>
}): UpstreamDescriptor<Name, Client, Lent> & {
  readonly settings: Settings, readonly queue: Queue, readonly responseTime: ResponseTime
} {
  return descriptor as UpstreamDescriptor<Name, Client, Lent> & {
    readonly settings: Settings
    readonly queue: Queue
    readonly responseTime: ResponseTime
  }
}

/** The client of a descriptor. */
export type ClientOf<Descriptor> = Descriptor extends { client (...args: never[]): infer Client } ? Client : never

/** The names of a descriptor's settings group, as written. */
export type SettingNames<Descriptor extends { readonly settings: TProperties }> = keyof {
  [Name in keyof Descriptor['settings'] as string extends Name ? never : Name]: unknown
}

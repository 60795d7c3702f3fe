import type { Static, TObject, TProperties } from '@sinclair/typebox'
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

/**
 * Everything the service knows of one upstream. The registry (registry.ts) lists them; the client
 * decorators, the call windows, the metric label sets, the settings and the integration health
 * check are made from that list.
 *
 * `Lent`: what the client needs of the service besides its settings group (other settings, a store
 * the service shares); the service checks that it has it.
 */
export interface UpstreamDescriptor<Name extends string = string, Client extends UpstreamClient = UpstreamClient, Lent = unknown> {
  /** The one name of the upstream: its client's decorator, its health check, its metric label. */
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
  readonly queue?: QueueSettings | undefined
  /** Its client, from its settings group (checked against `settings`). */
  client (settings: Readonly<Record<string, unknown>>, context: UpstreamOptions & Lent): Client
  /** Resolves while the upstream answers; rejects with the failure otherwise. */
  health (client: Client, signal: AbortSignal): Promise<void>
}

/**
 * A descriptor whose client reads its settings group as the group's schemas type it. The types of
 * its name and queue stay those written, for the types made from the registry.
 */
export function defineUpstream<
  const Name extends string,
  const Settings extends TProperties,
  Client extends UpstreamClient,
  const Queue extends QueueSettings | undefined = undefined,
  Lent = unknown
> (descriptor: {
  name: Name
  title: string
  description: string
  settings: Settings
  queue?: Queue
  client (settings: Static<TObject<Settings>>, context: UpstreamOptions & Lent): Client
  health (client: Client, signal: AbortSignal): Promise<void>
}): UpstreamDescriptor<Name, Client, Lent> & { readonly settings: Settings, readonly queue: Queue } {
  return descriptor as UpstreamDescriptor<Name, Client, Lent> & { readonly settings: Settings, readonly queue: Queue }
}

/** The client of a descriptor. */
export type ClientOf<Descriptor> = Descriptor extends { client (...args: never[]): infer Client } ? Client : never

/** The names of a descriptor's settings group, as written. */
export type SettingNames<Descriptor extends { readonly settings: TProperties }> = keyof {
  [Name in keyof Descriptor['settings'] as string extends Name ? never : Name]: unknown
}

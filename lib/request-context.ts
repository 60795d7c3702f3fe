import { AsyncLocalStorage } from 'node:async_hooks'
import type { FastifyBaseLogger } from 'fastify'

/**
 * The request context: the work that code runs for, whose correlation id its log lines and upstream
 * calls carry. A request's, or the service's own work run as a request of its own (a platform
 * event's hand-off, a provisioning job).
 */
export interface RequestContext {
  correlationId: string
  log: FastifyBaseLogger
}

/*
 * Node's AsyncLocalStorage, by hand: @fastify/request-context keeps a context per request only,
 * and provisioning jobs and platform events need one of their own too. The same storage holds
 * OpenTelemetry's context while tracing is on (lib/tracing-sdk.ts): with a second storage, every
 * promise a request creates would carry two stores.
 */
interface Scope {
  readonly work: RequestContext | undefined
  /** OpenTelemetry's context, opaque here: this module loads nothing of OpenTelemetry's. */
  readonly trace: unknown
}

const storage = new AsyncLocalStorage<Scope>()

/** Runs `work` (and everything it starts) as part of `context`, in the current trace context. */
export function runInContext<T> (context: RequestContext, work: () => T): T {
  return storage.run({ work: context, trace: storage.getStore()?.trace }, work)
}

export function currentContext (): RequestContext | undefined {
  return storage.getStore()?.work
}

/** Runs `work` in OpenTelemetry's context `trace`, keeping the current request context. */
export function runInTrace<T> (trace: unknown, work: () => T): T {
  return storage.run({ work: storage.getStore()?.work, trace }, work)
}

/** OpenTelemetry's current context, as `runInTrace` set it; undefined outside any. */
export function currentTrace (): unknown {
  return storage.getStore()?.trace
}

/** Runs `work` outside any work and trace: the SDK's own lines, which no request caused. */
export function outsideAnyWork<T> (work: () => T): T {
  return storage.exit(work)
}

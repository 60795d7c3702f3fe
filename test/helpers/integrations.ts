import type { Redis } from 'ioredis'
import { CrmClient } from '../../integrations/crm/client.js'
import { DailyUsageStore } from '../../integrations/crm/daily-usage.js'
import { UpstreamFailure } from '../../lib/errors.js'
import type { UpstreamCall, UpstreamLogger } from '../../integrations/upstream.js'
import { crmDailyUsageKey } from '../../plugins/app/redis-keys.js'

export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error'
  details: Record<string, unknown>
  message: string
}

export interface Recorder {
  log: UpstreamLogger
  lines: LogLine[]
  onCall: (call: UpstreamCall) => void
  calls: UpstreamCall[]
}

/** A logger that keeps every line, and an observer that keeps every call, for one client. */
export function recorder (): Recorder {
  const lines: LogLine[] = []
  const calls: UpstreamCall[] = []
  const at = (level: LogLine['level']) => (details: Record<string, unknown>, message: string) => { lines.push({ level, details, message }) }
  return {
    log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
    lines,
    onCall: call => { calls.push(call) },
    calls
  }
}

/**
 * A client test's clients, made by `create` with one recorder, and the failures they gave (to
 * check that none carries a secret); `closeClients` ends them all.
 */
export function upstreamClients<Client extends { close: () => Promise<void> }, Options> (create: (options: Partial<Options>, recorded: Recorder) => Client) {
  const recorded = recorder()
  const errors: Error[] = []
  const clients: Client[] = []
  return {
    recorded,
    errors,
    client (options: Partial<Options> = {}): Client {
      const created = create(options, recorded)
      clients.push(created)
      return created
    },
    async failure (promise: Promise<unknown>): Promise<UpstreamFailure> {
      const error = await failureOf(promise)
      errors.push(error)
      return error
    },
    async closeClients (): Promise<void> {
      await Promise.all(clients.map(client => client.close()))
    }
  }
}

/** Awaits a promise that must reject with an UpstreamFailure, and returns it. */
export async function failureOf (promise: Promise<unknown>): Promise<UpstreamFailure> {
  try {
    await promise
  } catch (error) {
    if (error instanceof UpstreamFailure) return error
    throw new Error(`expected an UpstreamFailure, got ${String(error)}`)
  }
  throw new Error('expected a rejection')
}

/** Everything an operator could read: log lines, and the message and stack of every error. */
export function readable (lines: readonly LogLine[], errors: readonly Error[]): string[] {
  return [
    ...lines.map(line => `${line.message} ${JSON.stringify(line.details)}`),
    ...errors.flatMap(error => [error.message, error.stack ?? ''])
  ]
}

export function leaks (texts: readonly string[], secrets: readonly string[]): string[] {
  return secrets.filter(secret => texts.some(text => text.includes(secret)))
}

/** A CRM client of the sandbox's org, at API version 60.0, keeping its daily usage in `redis`. */
export function sandboxCrmClient (settings: Record<string, string | undefined>, redis: Redis): CrmClient {
  return new CrmClient({
    loginUrl: settings.CRM_LOGIN_URL ?? '',
    clientId: settings.CRM_CLIENT_ID ?? '',
    username: settings.CRM_USERNAME ?? '',
    privateKey: settings.CRM_PRIVATE_KEY ?? '',
    apiVersion: '60.0',
    usage: new DailyUsageStore({ redis, key: crmDailyUsageKey('') })
  })
}

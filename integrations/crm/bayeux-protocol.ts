// The Bayeux 1.0 protocol as the Streaming API speaks it: the messages the subscriber sends, and what
// the replies, their advice and their error codes mean. Pure functions: the subscriber's loop
// (bayeux.ts) decides what to do about them.
import { UpstreamFailure } from '../../lib/errors.js'
import { StreamInterruption, type BayeuxMessage, type StreamFailure } from './bayeux-transport.js'
import { asRecord, brief, isRecord } from '../upstream.js'

/** A platform event as the Streaming API delivers it. */
export interface PlatformEventMessage {
  channel: string
  data: {
    schema?: string
    payload: Record<string, unknown>
    /** EventUuid comes with API version 52.0 and later only. */
    event: { replayId: number, EventUuid?: string }
  }
}

/** Bayeux errors are `code:args:message`; Salesforce leaves args empty (`400::The replayId {N} ... was invalid`). */
const INVALID_REPLAY = /^400:[^:]*:.*\breplay ?id\b.*\binvalid\b/i
const UNKNOWN_CLIENT = /^\d{3}:[^:]*:Unknown client/i
const AUTHENTICATION = /^401:/
/** Failures of a connect's HTTP exchange after which the same client connects again. */
export const LOST_ANSWERS: ReadonlySet<StreamFailure> = new Set<StreamFailure>([
  'http_5xx',
  'connection_refused',
  'upstream_error'
])
/** Failures after which the server expects a new handshake at once. */
export const HANDSHAKE_AT_ONCE: ReadonlySet<StreamFailure> = new Set<StreamFailure>([
  'auth_failed',
  'unknown_client',
  'handshake_advised'
])

function text (value: unknown): string {
  return typeof value === 'string' ? value : ''
}

export function handshakeMessage (): BayeuxMessage {
  return {
    channel: '/meta/handshake',
    version: '1.0',
    minimumVersion: '1.0',
    supportedConnectionTypes: ['long-polling'],
    ext: { replay: true }
  }
}

/** A long poll; `advice` asks the server for a timeout of its own (0: answer at once). */
export function connectMessage (clientId: string, advice?: { timeout: number }): BayeuxMessage {
  return {
    channel: '/meta/connect',
    clientId,
    connectionType: 'long-polling',
    ...advice === undefined ? {} : { advice }
  }
}

/**
 * A subscription to `channel` with the replay extension: from `replayId`, or -1 (new events) / -2 (every
 * retained event).
 */
export function subscribeMessage (clientId: string, channel: string, replayId: number): BayeuxMessage {
  return {
    channel: '/meta/subscribe',
    clientId,
    subscription: channel,
    ext: { replay: { [channel]: replayId } }
  }
}

export function disconnectMessage (clientId: string): BayeuxMessage {
  return { channel: '/meta/disconnect', clientId }
}

/**
 * The reply to the message sent with `id` among the messages of an answer; rejects with a
 * StreamInterruption when there is none.
 */
export function replyTo (replies: BayeuxMessage[], message: BayeuxMessage, id: string): BayeuxMessage {
  // Salesforce has answered a refused request with a lone error message that names no channel
  // (`[{"error":"401::Request requires authentication","successful":false}]`): it is the reply.
  const reply = replies.find(
    (candidate) => candidate.channel === message.channel && (candidate.id === undefined || String(candidate.id) === id)
  )
  if (reply !== undefined) return reply
  const lone = replies.find(candidate => candidate.channel === undefined && candidate.successful === false)
  if (lone === undefined) throw new StreamInterruption('upstream_error', `${text(message.channel)}: no reply in the answer`)
  return { ...lone, channel: message.channel }
}

/** The failure an unsuccessful reply (or one that advises against connecting again) stands for. */
export function refusal (reply: BayeuxMessage): StreamInterruption {
  const error = text(reply.error)
  const failureReason = text(asRecord(asRecord(reply.ext).sfdc).failureReason)
  const reconnect = asRecord(reply.advice).reconnect
  const reason = brief([error, failureReason].filter(Boolean).join(' ')) || (typeof reconnect === 'string' ? `advice reconnect ${reconnect}` : 'unsuccessful')
  const message = `${text(reply.channel)}: ${reason}`
  const { interval } = asRecord(reply.advice)
  const advice = { intervalMs: typeof interval === 'number' && interval > 0 ? interval : 0 }
  // Bayeux: the error names the client the server no longer knows, whatever its code (CometD and
  // Salesforce send 403, the specification's example 402, Faye 401): a new handshake with the same
  // credentials. Only then is a 401 taken for a refused token.
  if (UNKNOWN_CLIENT.test(error)) return new StreamInterruption('unknown_client', message, advice)
  if (AUTHENTICATION.test(error) || AUTHENTICATION.test(failureReason)) {
    return new StreamInterruption('auth_failed', message, advice)
  }
  if (/limit exceeded/i.test(`${error} ${failureReason}`)) return new StreamInterruption('quota_exceeded', message, advice)
  if (reconnect === 'handshake') return new StreamInterruption('handshake_advised', message, advice)
  if (reconnect === 'none') return new StreamInterruption('reconnect_none', message, advice)
  return new StreamInterruption('upstream_error', message, advice)
}

/** A reply that advises a new handshake, or no reconnection at all. */
export function isReconnectRefused (reply: BayeuxMessage): boolean {
  const { reconnect } = asRecord(reply.advice)
  return reconnect === 'handshake' || reconnect === 'none'
}

/** A subscribe refused because the Streaming API no longer retains the replay position asked for. */
export function isInvalidReplay (reply: BayeuxMessage): boolean {
  return INVALID_REPLAY.test(text(reply.error))
}

/**
 * Whether a successful handshake reply grants the replay extension (`ext: {replay: true}`, as
 * Salesforce answers). A server without it ignores the replay position a subscribe asks for.
 */
export function grantsReplay (reply: BayeuxMessage): boolean {
  return asRecord(reply.ext).replay === true
}

export function interruptionOf (error: unknown): StreamInterruption {
  if (error instanceof StreamInterruption) return error
  if (error instanceof UpstreamFailure) return new StreamInterruption(error.failure, error.message)
  return new StreamInterruption('upstream_error', 'unexpected failure', { cause: error })
}

/** Why a platform event the channel delivered cannot be handed on: the short code the subscriber reports. */
export type PlatformEventDefect = 'event_without_replay_id' | 'event_without_payload'

/** What a delivered platform event lacks of what the service relies on, or undefined when it lacks nothing. */
export function platformEventDefect (message: BayeuxMessage): PlatformEventDefect | undefined {
  const data = asRecord(message.data)
  const { replayId } = asRecord(data.event)
  if (typeof replayId !== 'number' || !Number.isInteger(replayId)) return 'event_without_replay_id'
  return isRecord(data.payload) ? undefined : 'event_without_payload'
}

/**
 * The platform events of an answer on `channel`, in replayId order, and the ones dropped for what they lack
 * (with their replayId when they have one).
 */
export function platformEventsIn (
  replies: BayeuxMessage[],
  channel: string
): { events: PlatformEventMessage[], defective: Array<{ defect: PlatformEventDefect, replayId: unknown }> } {
  const events: PlatformEventMessage[] = []
  const defective: Array<{ defect: PlatformEventDefect, replayId: unknown }> = []
  for (const candidate of replies) {
    if (candidate.channel !== channel) continue
    const event = platformEvent(candidate)
    if (event !== undefined) events.push(event)
    else {
      const replayId = asRecord(asRecord(candidate.data).event).replayId
      defective.push({ defect: platformEventDefect(candidate) ?? 'event_without_payload', replayId })
    }
  }
  return { events: events.sort((a, b) => a.data.event.replayId - b.data.event.replayId), defective }
}

/**
 * The event a message carries, or undefined when it lacks its payload or an integer replayId: all
 * the service relies on. The schema id and EventUuid are kept when present; API versions before
 * 52.0 deliver no EventUuid.
 */
export function platformEvent (message: BayeuxMessage): PlatformEventMessage | undefined {
  const data = asRecord(message.data)
  const event = asRecord(data.event)
  const { schema, payload } = data
  const { replayId, EventUuid } = event
  if (typeof replayId !== 'number' || !Number.isInteger(replayId) || !isRecord(payload)) return undefined
  return {
    channel: text(message.channel),
    data: {
      ...typeof schema === 'string' ? { schema } : {},
      payload,
      event: { replayId, ...typeof EventUuid === 'string' ? { EventUuid } : {} }
    }
  }
}

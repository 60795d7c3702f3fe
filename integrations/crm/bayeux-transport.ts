import { Headers, Pool, getSetCookies } from 'undici'
import { classifyUpstreamFailure, type FailureClass } from '../../lib/errors.js'
import { asRecord, isRecord } from '../upstream.js'

export type BayeuxMessage = Record<string, unknown>

/** Why a subscription ended: a failure class, or what the Streaming API said. */
export type StreamFailure = FailureClass |
  'unknown_client' | 'handshake_advised' | 'reconnect_none' | 'events_rejected' | 'replay_unavailable' |
  /** An event dropped for what it lacks (it ends no subscription). */
  'event_without_replay_id' | 'event_without_payload'

/** Ends one subscription; the supervisor decides when to handshake again. */
export class StreamInterruption extends Error {
  /** The server's advice: how long to wait before the next handshake (ms). */
  readonly intervalMs: number

  constructor (readonly failure: StreamFailure, message: string, options?: ErrorOptions & { intervalMs?: number }) {
    super(message, options)
    this.name = 'StreamInterruption'
    this.intervalMs = options?.intervalMs ?? 0
  }
}

/**
 * The cookies one instance sets (BAYEUX_BROWSER, and any load balancer's), sent back with every request:
 * Salesforce refuses a client whose requests come without the browser cookie of its handshake.
 */
export class CookieJar {
  /** Each cookie's value and when it expires (epoch ms; Infinity for a session cookie). */
  readonly #cookies = new Map<string, { value: string, expiresAt: number }>()

  /** Keeps what the answer's Set-Cookie headers set; Max-Age wins over Expires, as RFC 6265 says. */
  store (setCookie: string | string[] | undefined, now = Date.now()): void {
    const headers = new Headers()
    for (const header of typeof setCookie === 'string' ? [setCookie] : (setCookie ?? [])) {
      headers.append('set-cookie', header)
    }
    for (const { name, value, maxAge, expires } of getSetCookies(headers)) {
      if (name === '') continue
      const expiresAt =
        maxAge !== undefined ? now + maxAge * 1000 : expires !== undefined ? new Date(expires).getTime() : Infinity
      if (expiresAt <= now) this.#cookies.delete(name)
      else this.#cookies.set(name, { value, expiresAt })
    }
  }

  /** The Cookie header: the cookies not expired by `now`. */
  header (now = Date.now()): string | undefined {
    const pairs: string[] = []
    for (const [name, { value, expiresAt }] of this.#cookies) {
      if (expiresAt <= now) this.#cookies.delete(name)
      else pairs.push(`${name}=${value}`)
    }
    return pairs.length === 0 ? undefined : pairs.join('; ')
  }
}

/**
 * Bayeux over HTTP to one instance's CometD endpoint: each request POSTs a JSON array of messages and
 * answers the array the server sends back. Every request is bounded by its own deadline as well as the
 * caller's signal, so undici's own timeouts are off (a long poll is legitimately quiet).
 */
export class BayeuxTransport {
  readonly #pool: Pool
  readonly #path: string
  readonly #cookies = new CookieJar()

  constructor (readonly instanceUrl: string, apiVersion: string) {
    const { origin, pathname } = new URL(`${instanceUrl}/cometd/${apiVersion}`)
    this.#pool = new Pool(origin, { headersTimeout: 0, bodyTimeout: 0 })
    this.#path = pathname
  }

  /**
   * Sends the messages and answers the server's. Rejects with a StreamInterruption, or with the signal's
   * reason once `signal` aborts.
   */
  async send (
    messages: BayeuxMessage[],
    accessToken: string,
    timeoutMs: number,
    signal?: AbortSignal
  ): Promise<BayeuxMessage[]> {
    const operation = messages.map(message => String(message.channel)).join(',')
    const deadline = new AbortController()
    const timer = setTimeout(() => deadline.abort(), timeoutMs)
    const abort = (): void => deadline.abort()
    signal?.addEventListener('abort', abort, { once: true })
    try {
      const cookie = this.#cookies.header()
      const response = await this.#pool.request({
        path: this.#path,
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json',
          authorization: `Bearer ${accessToken}`,
          ...(cookie === undefined ? {} : { cookie })
        },
        body: JSON.stringify(messages),
        signal: deadline.signal
      })
      this.#cookies.store(response.headers['set-cookie'])
      const text = await response.body.text()
      return this.#replies(operation, response.statusCode, text)
    } catch (error) {
      if (signal?.aborted === true) throw signal.reason
      if (error instanceof StreamInterruption) throw error
      if (deadline.signal.aborted) throw new StreamInterruption('timeout', `${operation}: no answer within ${timeoutMs} ms`)
      // The network error's message may name hosts; its class says enough.
      throw new StreamInterruption(classifyUpstreamFailure(error), `${operation}: ${classifyUpstreamFailure(error)}`)
    } finally {
      clearTimeout(timer)
      signal?.removeEventListener('abort', abort)
    }
  }

  async close (): Promise<void> {
    await this.#pool.close()
  }

  #replies (operation: string, status: number, text: string): BayeuxMessage[] {
    if (status === 401 || status === 403) throw new StreamInterruption('auth_failed', `${operation}: HTTP ${status}`)
    if (status >= 500) throw new StreamInterruption('http_5xx', `${operation}: HTTP ${status}`)
    if (status !== 200) {
      // Some Bayeux servers send their unsuccessful replies with a 4xx status (`400::The replayId ...
      // was invalid` as HTTP 400): the replies say what went wrong, and what to do, better than the status.
      const replies = messagesIn(text)
      if (replies?.some(reply => reply.successful === false) === true) return replies
      throw new StreamInterruption('upstream_error', `${operation}: HTTP ${status}`)
    }
    const replies = messagesIn(text)
    if (replies === undefined) throw new StreamInterruption('upstream_error', `${operation}: the answer is not a message array`)
    return replies
  }
}

/**
 * The transport to the instance of the latest CRM session: a new one (with an empty cookie jar) when the
 * instance changes.
 */
export class InstanceTransport {
  #current: BayeuxTransport | undefined

  constructor (private readonly apiVersion: string) {}

  for (instanceUrl: string): BayeuxTransport {
    if (this.#current?.instanceUrl !== instanceUrl) {
      this.#current?.close().catch(() => {})
      this.#current = new BayeuxTransport(instanceUrl, this.apiVersion)
    }
    return this.#current
  }

  async close (): Promise<void> {
    await this.#current?.close()
  }
}

/**
 * The Bayeux messages of an answer, or undefined when it holds none. A client must accept an array
 * of messages and may accept a single one, as CometD's clients do.
 */
function messagesIn (text: string): BayeuxMessage[] | undefined {
  let replies: unknown
  try {
    replies = JSON.parse(text)
  } catch {
    return undefined
  }
  if (isRecord(replies)) return [replies]
  return Array.isArray(replies) ? replies.map(asRecord) : undefined
}

import type { ServerResponse } from 'node:http'
import type { StatusChangeListener, OrderStatusChanges, OrderStatusChange } from '../orders/status-changes.js'
import type { RegisteredStream, SseStreams, StreamEnd, StreamOwner, StreamRefusal } from './index.js'

/** Redis stream ids are `<ms>-<seq>`; compares them in order. */
function streamIdAfter (a: string, b: string): boolean {
  const [aMs = 0, aSeq = 0] = a.split('-').map(Number)
  const [bMs = 0, bSeq = 0] = b.split('-').map(Number)
  return aMs !== bMs ? aMs > bMs : aSeq > bSeq
}

/** Who holds a stream: the portal user and the access token or cookie session it was opened with. */
function frame (event: OrderStatusChange): string {
  const { id, ...data } = event
  return `id: ${id}\nevent: order.status\ndata: ${JSON.stringify(data)}\n\n`
}

/**
 * One open `/api/events` response: its user's order changes, in id order, each once, from the
 * backlog first and then live. An object a stream with its methods on the prototype, rather than a
 * closure for each callback: an instance holds ten thousand of them.
 */
export class SseStream implements RegisteredStream, StatusChangeListener {
  #lastSent: string
  /** Changes heard while the backlog is read, sent after it; undefined once the stream is live. */
  #pending: OrderStatusChange[] | undefined = []

  constructor (
    readonly owner: StreamOwner,
    private readonly response: ServerResponse,
    private readonly registry: SseStreams,
    private readonly statusChanges: OrderStatusChanges,
    resumeFrom: string | undefined
  ) {
    this.#lastSent = resumeFrom ?? '0-0'
  }

  /** Joins the registry and listens to the user's changes, or says why the stream is refused. */
  open (): StreamRefusal | undefined {
    const refusal = this.registry.open(this)
    // Listening starts before the backlog is read, so that nothing falls between the two.
    if (refusal === undefined) this.statusChanges.listen(this.owner.clientId, this)
    return refusal
  }

  /** The backlog has been sent: what was heard meanwhile follows, and changes go out as they come. */
  goLive (backlog: OrderStatusChange[]): void {
    for (const event of backlog) this.#send(event)
    for (const event of this.#pending ?? []) this.#send(event)
    this.#pending = undefined
  }

  deliver (event: OrderStatusChange): void {
    if (this.#pending !== undefined) this.#pending.push(event)
    else this.#send(event)
  }

  heartbeat (): void {
    this.#write(': heartbeat\n\n')
  }

  end (reason: StreamEnd): void {
    this.#write(`event: ${reason === 'shutdown' ? 'shutdown' : 'session.ended'}\ndata: ${JSON.stringify({ reason })}\n\n`)
    this.drop()
  }

  /** Ends the response without a last event (Redis failed: the client reconnects). */
  drop (): void {
    this.disconnected()
    this.response.end()
  }

  /** The client went away, or the stream ended: nothing more is sent to it. */
  disconnected (): void {
    this.statusChanges.unlisten(this.owner.clientId, this)
    this.registry.release(this)
  }

  #send (event: OrderStatusChange): void {
    if (!streamIdAfter(event.id, this.#lastSent)) return
    this.#lastSent = event.id
    this.#write(frame(event))
  }

  // A stream may end (a logout, the shutdown) while it still reads its backlog: a write after the
  // end would raise an error event on the response, which nothing listens to.
  #write (text: string): void {
    if (this.response.writable) this.response.write(text)
  }
}

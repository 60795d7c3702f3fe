import { createServer, STATUS_CODES } from 'node:http'
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, Server, ServerResponse } from 'node:http'
import { setMaxListeners } from 'node:events'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'

export type FaultKind = 'latency' | 'error' | 'http5xx' | 'blackhole'

export interface Fault {
  kind: FaultKind
  /** Only calls on this route or below it (`rest` covers `rest/sobjects/Order`); every call when absent. */
  route?: string
  /** Only the next N matching calls; until cleared when absent. */
  times?: number
  /** Apply once the call has been handled: its effects happen, then the answer is delayed, replaced or lost. */
  after?: boolean
  /** latency: milliseconds added before answering. */
  ms?: number
  /** http5xx: the status (500 by default); error: replaces the protocol's usual status. */
  status?: number
  /** http5xx: the body (the status text by default). */
  body?: string
  /** error: the protocol error's message. */
  message?: string
  /** error: the protocol error's code (Salesforce `errorCode`, telecom `error.type`). */
  code?: string
  /** error on the streaming API: the Bayeux advice `reconnect` value sent with the error. */
  reconnect?: 'retry' | 'handshake' | 'none'
  /** error on the streaming API: the advice `interval` (ms) sent with `reconnect` (0 by default). */
  interval?: number
}

export interface RecordedCall {
  at: string
  method: string
  path: string
  route: string
  headers: Record<string, string>
  params?: Record<string, unknown>
}

export interface IncomingCall {
  method: string
  path: string
  query: URLSearchParams
  headers: IncomingHttpHeaders
  body: Buffer
  /** Aborted when the client goes away or the simulator stops. */
  signal: AbortSignal
}

export interface Reply {
  status: number
  headers?: OutgoingHttpHeaders
  body?: string
  /** Runs once the answer has been written out. */
  afterSent?: () => void
}

export interface Endpoint {
  route: string
  /** What the call record keeps of the request, secrets left out. */
  params?: Record<string, unknown>
  /** Resolves to undefined when the call is never answered (a hung long poll). */
  handle: () => Reply | undefined | Promise<Reply | undefined>
  /** This protocol's own error answer, for `error` faults. */
  protocolError: (fault: Fault) => Reply
}

export interface SimulatorOptions {
  host?: string
  /** 0 (the default) picks a free port on the first start; later starts reuse it. */
  port?: number
  /** The calls kept for `calls`, the most recent (default 10,000): a long-running sandbox stays within bounds. */
  maxRecordedCalls?: number
}

export class SandboxControlError extends Error {}

const REDACTED_HEADERS = new Set(['authorization', 'proxy-authorization', 'cookie'])
const FAULT_KINDS = new Set<string>(['latency', 'error', 'http5xx', 'blackhole'])
const MAX_BODY_BYTES = 1024 * 1024

/**
 * Where a run's record ids start. The real systems never give an id twice, but a simulator that
 * restarts forgets what it gave: counting on from the clock (seconds since 2025) keeps a new run's
 * ids apart from an earlier run's, which a database kept between runs still holds.
 */
export function firstIdOfRun (): number {
  return Math.floor((Date.now() - Date.UTC(2025, 0, 1)) / 1000)
}

export function jsonReply (status: number, body: unknown, headers: OutgoingHttpHeaders = {}): Reply {
  return { status, headers: { 'content-type': 'application/json;charset=UTF-8', ...headers }, body: JSON.stringify(body) }
}

export function textReply (status: number, text: string, headers: OutgoingHttpHeaders = {}): Reply {
  return { status, headers: { 'content-type': 'text/plain;charset=UTF-8', ...headers }, body: text }
}

export function emptyReply (status = 204, headers: OutgoingHttpHeaders = {}): Reply {
  return { status, headers }
}

/** Parses a JSON request body for a control route, or answers 400. */
export function controlBody (call: IncomingCall): Record<string, unknown> {
  if (call.body.length === 0) return {}
  let value: unknown
  try {
    value = JSON.parse(call.body.toString('utf8'))
  } catch {
    throw new SandboxControlError('body is not JSON')
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new SandboxControlError('body must be a JSON object')
  }
  return value as Record<string, unknown>
}

export function bearerToken (headers: IncomingHttpHeaders, schemes = ['bearer']): string | undefined {
  const [scheme, token] = (headers.authorization ?? '').split(' ')
  return scheme !== undefined && schemes.includes(scheme.toLowerCase()) && token ? token : undefined
}

export function parseFault (value: unknown): Fault {
  if (typeof value !== 'object' || value === null) throw new SandboxControlError('a fault is a JSON object')
  const fault = value as Record<string, unknown>
  if (typeof fault.kind !== 'string' || !FAULT_KINDS.has(fault.kind)) {
    throw new SandboxControlError('fault.kind must be latency, error, http5xx or blackhole')
  }
  for (const key of ['route', 'body', 'message', 'code', 'reconnect']) {
    if (fault[key] !== undefined && typeof fault[key] !== 'string') throw new SandboxControlError(`fault.${key} must be a string`)
  }
  for (const key of ['times', 'ms', 'status', 'interval']) {
    if (fault[key] !== undefined && !(Number.isInteger(fault[key]) && (fault[key] as number) >= 0)) {
      throw new SandboxControlError(`fault.${key} must be a non-negative integer`)
    }
  }
  if (fault.kind === 'http5xx' && fault.status !== undefined && ((fault.status as number) < 500 || (fault.status as number) > 599)) {
    throw new SandboxControlError('fault.status of an http5xx fault must be 500-599')
  }
  if (fault.after !== undefined && typeof fault.after !== 'boolean') throw new SandboxControlError('fault.after must be a boolean')
  return fault as unknown as Fault
}

function warn (error: unknown): void {
  process.emitWarning(`sandbox: ${String(error)}`)
}

function routeMatches (faultRoute: string | undefined, route: string): boolean {
  return faultRoute === undefined || route === faultRoute || route.startsWith(`${faultRoute}/`)
}

function recordableHeaders (headers: IncomingHttpHeaders): Record<string, string> {
  const kept: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !REDACTED_HEADERS.has(name)) kept[name] = Array.isArray(value) ? value.join(', ') : value
  }
  return kept
}

export function untilAborted (signal: AbortSignal): Promise<void> {
  return new Promise(resolve => {
    if (signal.aborted) resolve()
    else signal.addEventListener('abort', () => resolve(), { once: true })
  })
}

async function readBody (request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of request) {
    size += (chunk as Buffer).length
    if (size > MAX_BODY_BYTES) throw new SandboxControlError('request body too large')
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}

/**
 * An HTTP upstream simulator: one node:http server that can go down and come back on the same port,
 * with injectable faults, a record of the calls it received and a control surface under `/__sandbox/`.
 */
export abstract class Simulator {
  readonly host: string
  #port: number
  #server: Server | undefined
  #lifetime = Simulator.#newLifetime()
  #faults: Fault[] = []
  #calls: RecordedCall[] = []
  readonly #maxRecordedCalls: number
  #callsInProgress = 0
  #upTimer: NodeJS.Timeout | undefined
  #closed = false

  /** Every request in flight listens to it (many at once under a black-hole): no listener limit. */
  static #newLifetime (): AbortController {
    const lifetime = new AbortController()
    setMaxListeners(0, lifetime.signal)
    return lifetime
  }

  constructor (options: SimulatorOptions = {}) {
    this.host = options.host ?? '127.0.0.1'
    this.#port = options.port ?? 0
    this.#maxRecordedCalls = options.maxRecordedCalls ?? 10_000
  }

  get url (): string {
    return `http://${this.host}:${this.#port}`
  }

  get port (): number {
    return this.#port
  }

  get isUp (): boolean {
    return this.#server !== undefined
  }

  get faults (): readonly Fault[] {
    return this.#faults.map(fault => ({ ...fault }))
  }

  /** The calls received, oldest first: the most recent `maxRecordedCalls` of them. */
  get calls (): readonly RecordedCall[] {
    return [...this.#calls]
  }

  /** Calls being handled now: received, and neither answered nor given up by their client. */
  get callsInProgress (): number {
    return this.#callsInProgress
  }

  async start (): Promise<this> {
    this.#closed = false
    await this.up()
    return this
  }

  /** Stops until the next start(): open long polls, blackholed requests and keep-alive sockets are ended at once. */
  async close (): Promise<void> {
    this.#closed = true
    clearTimeout(this.#upTimer)
    await this.down()
  }

  /** Listens again on the same port, with the data it had. */
  async up (): Promise<void> {
    if (this.#server !== undefined) return
    const server = createServer((request, response) => this.#serve(request, response))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.#port, this.host, () => {
        server.off('error', reject)
        resolve()
      })
    })
    this.#port = (server.address() as AddressInfo).port
    this.#lifetime = Simulator.#newLifetime()
    this.#server = server
  }

  /** Closes the port, so that connections are refused, and ends every open connection. */
  async down (): Promise<void> {
    const server = this.#server
    if (server === undefined) return
    this.#server = undefined
    this.#lifetime.abort()
    const closed = new Promise(resolve => server.close(resolve))
    server.closeAllConnections()
    await closed
  }

  /** Goes down now and comes back after `ms`. */
  async downFor (ms: number): Promise<void> {
    clearTimeout(this.#upTimer)
    await this.down()
    if (this.#closed) return
    this.#upTimer = setTimeout(() => { this.up().catch(warn) }, ms)
  }

  injectFault (fault: Fault): void {
    this.#faults.push({ ...fault })
  }

  clearFaults (): void {
    this.#faults = []
  }

  resetCalls (): void {
    this.#calls = []
  }

  protected abstract endpoint (call: IncomingCall): Endpoint

  /** This simulator's own control routes under `/__sandbox/`; undefined when the route is not one of them. */
  protected control (_call: IncomingCall): Reply | undefined {
    return undefined
  }

  async #serve (request: IncomingMessage, response: ServerResponse): Promise<void> {
    // Aborted when the client goes away or the server goes down while the call is handled. Not
    // once it is answered: an abort costs the call several microseconds, with nothing left to stop.
    const ended = new AbortController()
    const { signal } = ended
    const lifetime = this.#lifetime.signal
    let handled = false
    this.#callsInProgress++
    const end = (): void => { if (!handled) ended.abort() }
    lifetime.addEventListener('abort', end, { once: true })
    response.on('close', () => {
      lifetime.removeEventListener('abort', end)
      end()
    })
    let reply: Reply | undefined
    try {
      const url = new URL(request.url ?? '/', 'http://sandbox')
      const call: IncomingCall = {
        method: request.method ?? 'GET',
        path: url.pathname,
        query: url.searchParams,
        headers: request.headers,
        body: await readBody(request),
        signal
      }
      reply = call.path.startsWith('/__sandbox/') ? await this.#control(call) : await this.#dispatch(call)
    } catch (error) {
      reply = error instanceof SandboxControlError
        ? jsonReply(400, { error: error.message })
        : textReply(500, `sandbox failure: ${String(error)}`)
    }
    handled = true
    this.#callsInProgress--
    if (reply === undefined || signal.aborted) return
    response.writeHead(reply.status, reply.headers)
    response.end(reply.body, reply.afterSent)
  }

  async #dispatch (call: IncomingCall): Promise<Reply | undefined> {
    const endpoint = this.endpoint(call)
    this.#calls.push({
      at: new Date().toISOString(),
      method: call.method,
      path: call.path,
      route: endpoint.route,
      headers: recordableHeaders(call.headers),
      ...(endpoint.params === undefined ? {} : { params: endpoint.params })
    })
    if (this.#calls.length > this.#maxRecordedCalls) this.#calls.shift()
    const faults = this.#takeFaults(endpoint.route)
    const before = await this.#applyFaults(faults.filter(fault => fault.after !== true), endpoint, call.signal)
    if (before !== 'none') return before
    const reply = await endpoint.handle()
    const after = await this.#applyFaults(faults.filter(fault => fault.after === true), endpoint, call.signal)
    return after === 'none' ? reply : after
  }

  #takeFaults (route: string): Fault[] {
    const taken: Fault[] = []
    for (const fault of this.#faults) {
      if (!routeMatches(fault.route, route)) continue
      taken.push(fault)
      if (fault.times !== undefined) fault.times -= 1
    }
    this.#faults = this.#faults.filter(fault => fault.times === undefined || fault.times > 0)
    return taken
  }

  /** The answer the faults impose, undefined for no answer at all, or 'none' when they leave the answer alone. */
  async #applyFaults (faults: Fault[], endpoint: Endpoint, signal: AbortSignal): Promise<Reply | undefined | 'none'> {
    const delay = faults.reduce((sum, fault) => sum + (fault.kind === 'latency' ? fault.ms ?? 0 : 0), 0)
    if (delay > 0) await sleep(delay, undefined, { signal }).catch(() => {})
    const fault = faults.find(candidate => candidate.kind !== 'latency')
    switch (fault?.kind) {
      case 'blackhole':
        await untilAborted(signal)
        return undefined
      case 'http5xx': {
        const status = fault.status ?? 500
        return textReply(status, fault.body ?? STATUS_CODES[status] ?? 'Server Error')
      }
      case 'error':
        return endpoint.protocolError(fault)
      default:
        return 'none'
    }
  }

  async #control (call: IncomingCall): Promise<Reply> {
    switch (`${call.method} ${call.path}`) {
      case 'GET /__sandbox/calls':
        return jsonReply(200, { calls: this.calls })
      case 'DELETE /__sandbox/calls':
        this.resetCalls()
        return emptyReply()
      case 'GET /__sandbox/faults':
        return jsonReply(200, { faults: this.faults })
      case 'POST /__sandbox/faults':
        this.injectFault(parseFault(controlBody(call)))
        return jsonReply(201, { faults: this.faults })
      case 'DELETE /__sandbox/faults':
        this.clearFaults()
        return emptyReply()
      case 'POST /__sandbox/down': {
        const { ms = 1000 } = controlBody(call)
        if (!Number.isInteger(ms) || (ms as number) < 0) throw new SandboxControlError('ms must be a non-negative integer')
        return { ...jsonReply(202, { downForMs: ms }), afterSent: () => { this.downFor(ms as number).catch(warn) } }
      }
    }
    const reply = this.control(call)
    if (reply === undefined) return jsonReply(404, { error: `no sandbox control ${call.method} ${call.path}` })
    return reply
  }
}

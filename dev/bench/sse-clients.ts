import { connect, type Socket } from 'node:net'
import { Redis } from 'ioredis'

// The client side of the streams suite, in a process of its own (forked by streams.ts, driven over
// its IPC channel): thousands of /api/events streams on raw sockets, and the publisher of the order
// status changes whose latency it measures, on the same clock as the receipts.

export interface StreamSpec { clientId: number, token: string }

export type Command =
  | { kind: 'open', url: string, streams: StreamSpec[], concurrency: number, timeoutMs: number }
  | { kind: 'fanout', redisUrl: string, channel: string, perSecond: number, seconds: number, drainMs: number }
  | { kind: 'close' }

export interface Opened { kind: 'opened', milliseconds: number, open: number, statuses: Record<string, number> }

export interface LatencySummary { p50: number, p90: number, p99: number, max: number }

export interface FannedOut {
  kind: 'fanned'
  published: number
  /** Frames that should have arrived: for each change, one on every open stream of its client. */
  expected: number
  received: number
  /** Frames that arrived on a stream of another client than the change's. */
  misdelivered: number
  /** Streams that ended or failed while the changes were published. */
  ended: number
  /** From the publish to each frame's arrival, ms. */
  perFrame: LatencySummary
  /** From the publish to the arrival on the last of its client's streams, ms. */
  perChange: LatencySummary
}

export type Report = Opened | FannedOut | { kind: 'closed' } | { kind: 'failed', message: string }

interface Stream {
  clientId: number
  socket: Socket
  status: number
  /** Received text not yet scanned to its end: the head until it is whole, then a partial line. */
  pending: string
  ended: boolean
}

const streams: Stream[] = []
const streamsOf = new Map<number, Stream[]>()

/** Changes of the current fan-out: by sequence number, when each was published and for whom. */
interface Fanout {
  base: number
  publishedAt: Float64Array
  clientOf: Int32Array
  /** Each frame's latency, in order of arrival. */
  arrivals: Float64Array
  arrived: number
  /** For each change: the latency of its last frame so far, and how many of its frames arrived. */
  lastArrival: Float64Array
  arrivedOf: Int32Array
  expectedOf: Int32Array
  misdelivered: number
}

let fanout: Fanout | undefined

const ID_LINE = /id: (\d+)-(\d+)\n/g

function scan (stream: Stream, text: string, now: number): void {
  ID_LINE.lastIndex = 0
  let match: RegExpExecArray | null
  while ((match = ID_LINE.exec(text)) !== null) {
    if (fanout === undefined || Number(match[1]) !== fanout.base) continue
    const seq = Number(match[2])
    if (fanout.clientOf[seq] !== stream.clientId) {
      fanout.misdelivered++
      continue
    }
    recordArrival(seq, now - fanout.publishedAt[seq]!)
  }
  const lastLine = text.lastIndexOf('\n')
  stream.pending = lastLine === -1 ? text : text.slice(lastLine + 1)
}

function recordArrival (seq: number, latency: number): void {
  if (fanout === undefined) return
  // More arrivals than expected would be duplicates: counted, not kept.
  if (fanout.arrived < fanout.arrivals.length) fanout.arrivals[fanout.arrived] = latency
  fanout.arrived++
  fanout.arrivedOf[seq]!++
  if (latency > fanout.lastArrival[seq]!) fanout.lastArrival[seq] = latency
}

function onData (stream: Stream, chunk: Buffer, opened: (stream: Stream) => void): void {
  const now = performance.now()
  let text = stream.pending + chunk.toString('latin1')
  if (stream.status === 0) {
    const headEnd = text.indexOf('\r\n\r\n')
    if (headEnd === -1) {
      stream.pending = text
      return
    }
    stream.status = Number(text.slice(9, 12))
    text = text.slice(headEnd + 4)
    opened(stream)
  }
  scan(stream, text, now)
}

async function open ({ url, streams: specs, concurrency, timeoutMs }: Extract<Command, { kind: 'open' }>): Promise<Opened> {
  const { hostname, port } = new URL(url)
  const started = performance.now()
  const statuses: Record<string, number> = {}
  let next = 0
  let settled = 0
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, timeoutMs)
    const settle = (status: string) => {
      statuses[status] = (statuses[status] ?? 0) + 1
      settled++
      if (settled === specs.length) {
        clearTimeout(timer)
        resolve()
      } else if (next < specs.length) {
        start(specs[next++]!)
      }
    }
    const start = ({ clientId, token }: StreamSpec) => {
      const socket = connect({ host: hostname, port: Number(port) })
      const stream: Stream = { clientId, socket, status: 0, pending: '', ended: false }
      let counted = false
      const count = (status: string) => {
        if (counted) return
        counted = true
        settle(status)
      }
      socket.setNoDelay(true)
      socket.write(`GET /api/events HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${token}\r\n\r\n`)
      socket.on('data', (chunk: Buffer) => onData(stream, chunk, (opened) => {
        if (opened.status === 200) {
          streams.push(opened)
          const own = streamsOf.get(clientId) ?? []
          own.push(opened)
          streamsOf.set(clientId, own)
        }
        count(String(opened.status))
      }))
      socket.on('error', (error: NodeJS.ErrnoException) => count(error.code ?? 'error'))
      socket.on('close', () => {
        stream.ended = true
        count('closed')
      })
    }
    for (; next < Math.min(concurrency, specs.length); next++) start(specs[next]!)
  })
  return { kind: 'opened', milliseconds: performance.now() - started, open: streams.filter((stream) => !stream.ended).length, statuses }
}

function summary (values: Float64Array): LatencySummary {
  const sorted = Float64Array.from(values).sort()
  const at = (q: number) => sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: sorted.length === 0 ? NaN : sorted[sorted.length - 1]! }
}

async function fanOut ({ redisUrl, channel, perSecond, seconds, drainMs }: Extract<Command, { kind: 'fanout' }>): Promise<FannedOut> {
  const clients = [...streamsOf.keys()]
  const total = Math.round(perSecond * seconds)
  const expectedOf = new Int32Array(total)
  const clientOf = new Int32Array(total)
  // A stride prime to the number of clients: consecutive changes go to clients far apart, and every client has its turn.
  let stride = 7919
  while (clients.length % stride === 0) stride += 2
  let expected = 0
  for (let seq = 0; seq < total; seq++) {
    const clientId = clients[(seq * stride) % clients.length]!
    clientOf[seq] = clientId
    expectedOf[seq] = streamsOf.get(clientId)!.filter((stream) => !stream.ended).length
    expected += expectedOf[seq]!
  }
  const endedBefore = streams.filter((stream) => stream.ended).length
  fanout = {
    base: Date.now(),
    publishedAt: new Float64Array(total),
    clientOf,
    arrivals: new Float64Array(expected),
    arrived: 0,
    lastArrival: new Float64Array(total),
    arrivedOf: new Int32Array(total),
    expectedOf,
    misdelivered: 0
  }
  const publisher = new Redis(redisUrl)
  await publisher.ping()
  const current = fanout
  const at = new Date().toISOString()
  await new Promise<void>((resolve) => {
    const started = performance.now()
    let sent = 0
    const timer = setInterval(() => {
      const due = Math.min(total, Math.floor((performance.now() - started) / 1000 * perSecond) + 1)
      for (; sent < due; sent++) {
        const event = { id: `${current.base}-${sent}`, orderId: `bench-${sent}`, crmOrderId: null, status: 'Provisioning', failureReason: null, at }
        const message = JSON.stringify({ clientId: current.clientOf[sent], event })
        current.publishedAt[sent] = performance.now()
        publisher.publish(channel, message).catch(() => {})
      }
      if (sent === total) {
        clearInterval(timer)
        resolve()
      }
    }, 2)
  })
  await new Promise((resolve) => setTimeout(resolve, drainMs))
  publisher.disconnect()
  const result: FannedOut = {
    kind: 'fanned',
    published: total,
    expected,
    received: current.arrived,
    misdelivered: current.misdelivered,
    ended: streams.filter((stream) => stream.ended).length - endedBefore,
    perFrame: summary(current.arrivals.subarray(0, Math.min(current.arrived, current.arrivals.length))),
    // Of the changes whose every frame arrived.
    perChange: summary(current.lastArrival.filter((_, seq) => expectedOf[seq]! > 0 && current.arrivedOf[seq] === expectedOf[seq]))
  }
  fanout = undefined
  return result
}

async function closeAll (): Promise<void> {
  await Promise.all(streams.map((stream) => new Promise<void>((resolve) => {
    if (stream.ended || stream.socket.destroyed) {
      resolve()
      return
    }
    stream.socket.once('close', () => resolve())
    stream.socket.destroy()
  })))
  streams.length = 0
  streamsOf.clear()
}

async function handle (command: Command): Promise<Report> {
  if (command.kind === 'open') return open(command)
  if (command.kind === 'fanout') return fanOut(command)
  await closeAll()
  return { kind: 'closed' }
}

process.on('message', (command: Command) => {
  handle(command).then(
    (report) => process.send!(report),
    (error: unknown) => process.send!({ kind: 'failed', message: error instanceof Error ? error.message : String(error) } satisfies Report)
  )
})
process.on('disconnect', () => process.exit(0))

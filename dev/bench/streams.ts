import { execFileSync, fork, type ChildProcess } from 'node:child_process'
import { createHmac, randomUUID } from 'node:crypto'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import { TOKEN_AUDIENCE, TOKEN_ISSUER } from '../../plugins/external/jwt.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { DEV_BUILD, type RunOptions, type ServiceProcess } from '../tools/service-process.js'
import {
  DATABASE_URL, REDIS_URL,
  deleteKeys, ensureDatabase, median, peakRssMb, rssBytes, runKeyPrefix, serviceEnv, startQuiet, stop, ALT_NODE, altEnv
} from './common.js'
import { compareSnapshots, formatDifference } from './heap-summary.js'
import { InspectorSession, inspectorUrl } from './inspector.js'
import type { Command, FannedOut, LatencySummary, Opened, Report, StreamSpec } from './sse-clients.js'
import { orderStatusChannel } from '../../plugins/app/redis-keys.js'

const STREAMS = Number(process.env.BENCH_STREAMS ?? 10_000)
const USERS = Number(process.env.BENCH_STREAM_USERS ?? 2000)
const CHANGES_PER_SECOND = Number(process.env.BENCH_STREAM_CHANGES ?? 100)
const FANOUT_SECONDS = Number(process.env.BENCH_STREAM_SECONDS ?? 10)
const ROUNDS_OF_STREAMS = Number(process.env.BENCH_STREAM_ROUNDS ?? 2)
// Streams being opened at once: a browser opens its one at page load; thousands at once would
// measure the listen backlog instead.
const OPEN_CONCURRENCY = 100
// BENCH_STREAM_HEAP=1: heap snapshots of every target before and after its streams open, and what
// one stream adds to the heap, by kind of object and holder. Snapshots are large and move the RSS
// figures: a separate run, with fewer streams (BENCH_STREAMS=2000).
const HEAP = process.env.BENCH_STREAM_HEAP === '1'
// Another build of the project (its dist-dev folder), measured as a third target.
const ALT_BUILD = process.env.BENCH_ALT_BUILD
const OPEN_TIMEOUT_MS = 120_000
// Opened, fed and closed before the memory is first read, so that what the first streams compile
// and allocate once (code, pools, the sandbox's first requests) is not counted per stream.
const WARM_UP_USERS = 100
const WARM_UP_SECONDS = 2
// Changes still on their way when the last is published.
const DRAIN_MS = 2000
// A process holds a descriptor per stream, and a few dozen of its own.
const DESCRIPTORS_SPARE = 1000

interface Round {
  openMs: number
  /** RSS after a full collection, with every stream open, less the same before any, per stream. */
  rssPerStream: number
  heapPerStream: number
  fanout: FannedOut
  peakRssMb: number
}

interface Target {
  name: string
  options: RunOptions
  rounds: Round[]
}

/** An access token as POST /auth/login issues them (HS256; sub, jti, iat, exp, iss, aud), signed with the service's secret. */
function accessToken (secret: string, clientId: number, ttlSeconds: number): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const unsigned = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: String(clientId), jti: randomUUID(), iat: now, exp: now + ttlSeconds, iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE })}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}

/** `perUser` streams of each of `users` clients (ids from 1), in turns: consecutive opens are of different clients. */
function streamSpecs (tokens: string[], users: number, perUser: number): StreamSpec[] {
  const specs: StreamSpec[] = []
  for (let turn = 0; turn < perUser; turn++) {
    for (let user = 0; user < users; user++) specs.push({ clientId: user + 1, token: tokens[user]! })
  }
  return specs
}

/** The client process, and a way to send it a command and wait for its report. */
function startClients (): { child: ChildProcess, ask: <R extends Report>(command: Command) => Promise<R> } {
  const child = fork(join(DEV_BUILD, 'dev', 'bench', 'sse-clients.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const ask = <R extends Report>(command: Command) => new Promise<R>((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`the client process exited with ${code}`))
    child.once('exit', onExit)
    child.once('message', (report: Report) => {
      child.off('exit', onExit)
      if (report.kind === 'failed') reject(new Error(`the client process: ${report.message}`))
      else resolve(report as R)
    })
    child.send(command)
  })
  return { child, ask }
}

function descriptorLimit (): number {
  return Number(execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim())
}

async function heapDifference (name: string, before: string, after: string): Promise<void> {
  const directory = join(projectRoot, 'logs', 'bench', 'heap', `streams-${new Date().toISOString().replaceAll(':', '-')}-${name.replaceAll(/[^a-z0-9-]+/gi, '-')}`)
  await mkdir(directory, { recursive: true })
  await writeFile(join(directory, 'before.heapsnapshot'), before)
  await writeFile(join(directory, 'after.heapsnapshot'), after)
  const difference = compareSnapshots(JSON.parse(before), JSON.parse(after))
  process.stdout.write(`${name}: the heap of ${STREAMS} streams (${directory})\n${formatDifference(difference, STREAMS, 25)}\n`)
}

async function measure (target: Target, tokens: string[], channel: string): Promise<Round> {
  const perUser = Math.ceil(STREAMS / USERS)
  const server: ServiceProcess = await startQuiet(target.options)
  const clients = startClients()
  const inspector = await InspectorSession.connect(inspectorUrl(server.stderr()))
  try {
    const fanout: Command = { kind: 'fanout', redisUrl: REDIS_URL, channel, perSecond: CHANGES_PER_SECOND, seconds: WARM_UP_SECONDS, drainMs: 500 }
    await clients.ask<Opened>({ kind: 'open', url: server.url, streams: streamSpecs(tokens, WARM_UP_USERS, perUser), concurrency: OPEN_CONCURRENCY, timeoutMs: OPEN_TIMEOUT_MS })
    await clients.ask<FannedOut>(fanout)
    await clients.ask({ kind: 'close' })
    await sleep(1000)

    const memory = async () => {
      await inspector.collectGarbage()
      return { rss: await rssBytes(server.child.pid!), heap: (await inspector.memoryUsage()).heapUsed }
    }
    const before = await memory()
    const snapshotBefore = HEAP ? await inspector.heapSnapshot() : undefined
    const opened = await clients.ask<Opened>({ kind: 'open', url: server.url, streams: streamSpecs(tokens, USERS, perUser).slice(0, STREAMS), concurrency: OPEN_CONCURRENCY, timeoutMs: OPEN_TIMEOUT_MS })
    if (opened.open !== STREAMS) throw new Error(`${target.name}: ${opened.open} of ${STREAMS} streams open (answers: ${JSON.stringify(opened.statuses)})`)
    await sleep(2000)
    const after = await memory()
    if (snapshotBefore !== undefined) await heapDifference(target.name, snapshotBefore, await inspector.heapSnapshot())
    const fanned = await clients.ask<FannedOut>({ ...fanout, seconds: FANOUT_SECONDS, drainMs: DRAIN_MS })
    if (fanned.misdelivered > 0 || fanned.received !== fanned.expected || fanned.ended > 0) {
      throw new Error(`${target.name}: ${fanned.received} of ${fanned.expected} frames arrived, ${fanned.misdelivered} on another client's stream, ${fanned.ended} streams ended`)
    }
    const round: Round = {
      openMs: opened.milliseconds,
      rssPerStream: (after.rss - before.rss) / STREAMS,
      heapPerStream: (after.heap - before.heap) / STREAMS,
      fanout: fanned,
      peakRssMb: await peakRssMb(server)
    }
    await clients.ask({ kind: 'close' })
    return round
  } finally {
    inspector.close()
    clients.child.kill()
    await stop(server)
  }
}

/**
 * 10,000 concurrent GET /api/events streams of 2,000 clients on one service instance against a bare
 * node:http SSE server fanning the same Redis channel out to the same connections: memory per
 * stream, time to open them, and the latency from an order status change published on Redis to its
 * frame on each of the client's streams, at 100 changes a second.
 */
export async function benchStreams (): Promise<void> {
  const needed = STREAMS + DESCRIPTORS_SPARE
  const limit = descriptorLimit()
  if (limit < needed) throw new Error(`ulimit -n is ${limit}: the service and the client process each hold a descriptor per stream; raise it to ${needed} at least`)
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('streams')
  // The service's channel of order status changes (OrderStatusChanges), which the bare server hears too; REDIS_URL names database 0.
  const channel = orderStatusChannel(keyPrefix, 0)
  const env = serviceEnv({
    DATABASE_URL,
    REDIS_KEY_PREFIX: keyPrefix,
    SSE_MAX_STREAMS: String(2 * STREAMS),
    SSE_MAX_STREAMS_PER_USER: String(Math.min(100, 2 * Math.ceil(STREAMS / USERS))),
    RATE_LIMIT_MAX: '1000000000',
    SHUTDOWN_DELAY_MS: '0'
  })
  const tokens = Array.from({ length: USERS }, (_, user) => accessToken(env.JWT_SECRET!, user + 1, 3 * 3600))
  const execArgv = ['--inspect=127.0.0.1:0']
  const dist = join(DEV_BUILD, 'dev')
  const bare: Target = { name: 'bare node:http', options: { entry: join(dist, 'bench', 'bare-sse.js'), env: { REDIS_URL, CHANNEL: channel }, execArgv }, rounds: [] }
  const service: Target = { name: 'service', options: { entry: join(dist, 'server.js'), env, execArgv }, rounds: [] }
  const alt: Target | undefined = ALT_BUILD === undefined ? undefined : { name: 'service (alt build)', options: { entry: join(ALT_BUILD, 'dev', 'server.js'), node: ALT_NODE, env: { ...env, ...altEnv() }, execArgv }, rounds: [] }
  const targets = [bare, service, ...alt === undefined ? [] : [alt]]
  try {
    for (let round = 1; round <= ROUNDS_OF_STREAMS; round++) {
      const order = targets.map((_, i) => targets[(i + round) % targets.length]!)
      for (const target of order) {
        const measured = await measure(target, tokens, channel)
        target.rounds.push(measured)
        process.stdout.write(`round ${round}, ${target.name}: opened in ${(measured.openMs / 1000).toFixed(1)} s, ` +
          `${(measured.rssPerStream / 1024).toFixed(1)} KB RSS a stream, p99 ${measured.fanout.perFrame.p99.toFixed(1)} ms\n`)
      }
    }
  } finally {
    await deleteKeys(keyPrefix)
  }

  const of = (target: Target, figure: (round: Round) => number) => median(target.rounds.map(figure))
  const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`
  const ms = (value: number) => `${value.toFixed(1)} ms`
  const latency = (target: Target, which: 'perFrame' | 'perChange') => {
    const pick = (key: keyof LatencySummary) => of(target, (round) => round.fanout[which][key])
    return `p50 ${ms(pick('p50'))}, p90 ${ms(pick('p90'))}, p99 ${ms(pick('p99'))}, max ${ms(pick('max'))}`
  }
  const line = (target: Target) => [
    `  ${target.name}:`,
    `    open ${STREAMS} streams:            ${(of(target, (round) => round.openMs) / 1000).toFixed(1)} s (${(STREAMS / of(target, (round) => round.openMs) * 1000).toFixed(0)} a second, ${OPEN_CONCURRENCY} at a time)`,
    `    memory per stream:           ${kb(of(target, (round) => round.rssPerStream))} RSS, ${kb(of(target, (round) => round.heapPerStream))} of it V8 heap`,
    `    publish to frame, each frame: ${latency(target, 'perFrame')}`,
    `    publish to the last stream:  ${latency(target, 'perChange')}`,
    `    peak RSS:                    ${Math.max(...target.rounds.map((round) => round.peakRssMb)).toFixed(0)} MB`
  ]
  const ratio = (figure: (round: Round) => number, target = service, baseline = bare) => (of(target, figure) / of(baseline, figure)).toFixed(2)
  const frames = service.rounds[0]!.fanout
  process.stdout.write([
    '',
    `GET /api/events, ${STREAMS} streams of ${USERS} clients (${Math.ceil(STREAMS / USERS)} each), ${ROUNDS_OF_STREAMS} alternating rounds, each target a fresh process every round`,
    `  ${CHANGES_PER_SECOND} changes a second for ${FANOUT_SECONDS} s, each to every stream of its client (${frames.published} changes, ${frames.expected} frames a round); medians of the rounds`,
    '  memory: RSS of the server process after two full collections (inspector), with every stream open less before any',
    ...line(bare),
    ...line(service),
    ...alt === undefined ? [] : line(alt),
    `  ratio service / bare, p99 each frame:  ${ratio((round) => round.fanout.perFrame.p99)} (target: service p99 <= 50 ms)`,
    `  ratio service / bare, memory a stream: ${ratio((round) => round.rssPerStream)} (target: service <= 10 KB)`,
    `  ratio service / bare, time to open:    ${ratio((round) => round.openMs)}`,
    ...alt === undefined
      ? []
      : [`  alt build / service: memory a stream ${ratio((round) => round.rssPerStream, alt, service)}, p99 ${ratio((round) => round.fanout.perFrame.p99, alt, service)}, time to open ${ratio((round) => round.openMs, alt, service)} (${ALT_BUILD})`],
    ''
  ].join('\n'))
}

import { spawn, type ChildProcess } from 'node:child_process'
import { Redis } from 'ioredis'
import { cpSync, mkdirSync, rmSync } from 'node:fs'
import { freePort } from './ports.js'
import { childReport, exited, waitFor } from './processes.js'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Sandbox } from '../../dev/sandbox/index.js'
import { buildTestApp, tempDir } from './app.js'

/**
 * A redis-server of the test's own, on its own port, which the test may stop, hang or kill
 * by PID. The shared Redis is never touched. A persistent one keeps its data (append-only file in
 * a temp dir) across a stop and start, as a production Redis behind a job queue must.
 */
export class PrivateRedis {
  #process: ChildProcess | undefined
  private constructor (readonly port: number, readonly dataDir?: string) {}

  static async start ({ persistent = false } = {}): Promise<PrivateRedis> {
    const redis = new PrivateRedis(await freePort(), persistent ? tempDir('redis') : undefined)
    await redis.start()
    return redis
  }

  get url (): string {
    return `redis://127.0.0.1:${this.port}`
  }

  get pid (): number {
    if (this.#process?.pid === undefined) throw new Error('redis-server is not running')
    return this.#process.pid
  }

  // A replica's full sync writes an RDB file even without persistence: in a temp dir, not the cwd.
  #workDir: string | undefined

  async start (): Promise<void> {
    this.#workDir ??= this.dataDir ?? tempDir('redis-work')
    const persistence = ['--appendonly', this.dataDir === undefined ? 'no' : 'yes', '--dir', this.#workDir]
    this.#process = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', ...persistence, '--loglevel', 'warning'], { stdio: ['ignore', 'pipe', 'pipe'] })
    const report = childReport(this.#process, 'redis-server')
    await waitFor(`redis-server on ${this.port}`, async () => {
      const client = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
      client.on('error', () => {})
      try {
        await client.connect()
        return (await client.ping()) === 'PONG'
      } finally {
        client.disconnect()
      }
    }, 15_000, report)
  }

  hang (): void { process.kill(this.pid, 'SIGSTOP') }
  resume (): void { process.kill(this.pid, 'SIGCONT') }

  /** A connection for the test's own commands (CONFIG, INFO), closed with the test; it does not reconnect. */
  client (t: Test): Redis {
    const client = new Redis(this.url, { maxRetriesPerRequest: 0, retryStrategy: () => null })
    client.on('error', () => {})
    t.teardown(() => client.disconnect())
    return client
  }

  /** A clean shutdown (SIGTERM: clients are disconnected, the append-only file is flushed). */
  async stop (): Promise<void> {
    await this.#end('SIGTERM')
  }

  async kill (): Promise<void> {
    await this.#end('SIGKILL')
    if (this.dataDir !== undefined) rmSync(this.dataDir, { recursive: true, force: true })
  }

  /**
   * Killed, then started again on the same port with no data: what clients see of a Redis without
   * persistence that restarts, or of a failover to an empty replica.
   */
  async restartEmpty (): Promise<void> {
    await this.kill()
    if (this.dataDir !== undefined) mkdirSync(this.dataDir, { recursive: true })
    await this.start()
  }

  /**
   * A copy of a persistent Redis's data directory as it stands: its append-only files hold every
   * write Redis has acknowledged (it writes them before it answers), as a backup would.
   */
  copyData (): string {
    if (this.dataDir === undefined) throw new Error('copyData needs a persistent redis-server')
    const copy = tempDir('redis-copy')
    cpSync(this.dataDir, copy, { recursive: true })
    return copy
  }

  /** Stopped, its data replaced by an older copy (copyData), started again on the same port: a Redis restored from a backup. */
  async restoreData (copy: string): Promise<void> {
    if (this.dataDir === undefined) throw new Error('restoreData needs a persistent redis-server')
    await this.stop()
    rmSync(this.dataDir, { recursive: true, force: true })
    cpSync(copy, this.dataDir, { recursive: true })
    await this.start()
  }

  async #end (signal: NodeJS.Signals): Promise<void> {
    const child = this.#process
    if (child === undefined) return
    this.#process = undefined
    process.kill(child.pid as number, 'SIGCONT')
    child.kill(signal)
    await exited(child)
  }
}

/** The app pointed at a redis-server of the test's own, which the test may stop, hang or kill; both end with the test. */
export async function buildTestAppOnPrivateRedis (t: Test, overrides: Record<string, string> = {}, sandbox?: Sandbox): Promise<{ redis: PrivateRedis, app: FastifyInstance }> {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const app = await buildTestApp(t, { REDIS_URL: redis.url, ...overrides }, sandbox)
  return { redis, app }
}

import { spawn, type ChildProcess } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { freePort } from './ports.js'
import { childReport, exited, waitFor } from './processes.js'
import { PrivateRedis } from './private-redis.js'
import { tempDir } from './made.js'

/** How long a primary may not answer before a Sentinel holds it down: small, so a test fails over in seconds. */
export const SENTINEL_DOWN_AFTER_MS = 1000
/** Bounds each step of a failover; a failed attempt is tried again after twice this. */
export const SENTINEL_FAILOVER_TIMEOUT_MS = 3000

/** A connection to a Redis or Sentinel port for the test's own commands; it does not reconnect. */
function adminClient (port: number, password?: string): Redis {
  const client = new Redis({ port, host: '127.0.0.1', password, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true })
  client.on('error', () => {})
  return client
}

async function ask<T> (port: number, command: (client: Redis) => Promise<T>, password?: string): Promise<T> {
  const client = adminClient(port, password)
  try {
    await client.connect()
    return await command(client)
  } finally {
    client.disconnect()
  }
}

/**
 * A primary, one replica and three Sentinels of the test's own on loopback ports (a quorum of two),
 * each ended by PID with the test. The shared Redis is never touched.
 */
export class PrivateSentinelSet {
  readonly name = 'portal-test'
  readonly #sentinels: Array<{ port: number, process: ChildProcess }> = []

  /** `password`: the Sentinels require it (their requirepass), as a production set may. */
  private constructor (readonly primary: PrivateRedis, readonly replica: PrivateRedis, readonly password: string | undefined) {}

  static async start (t: Test, { password }: { password?: string } = {}): Promise<PrivateSentinelSet> {
    const set = new PrivateSentinelSet(await PrivateRedis.start(), await PrivateRedis.start(), password)
    t.teardown(() => set.end())
    await ask(set.replica.port, (client) => client.replicaof('127.0.0.1', set.primary.port))
    await waitFor('the replica in sync', () => ask(set.replica.port, async (client) => (await client.info('replication')).includes('master_link_status:up')))
    for (let i = 0; i < 3; i++) await set.#startSentinel()
    await waitFor('the Sentinels to know the replica and each other', () => set.#everySentinel(async (client) => {
      const replicas = await client.call('SENTINEL', 'REPLICAS', set.name) as unknown[][]
      const sentinels = await client.call('SENTINEL', 'SENTINELS', set.name) as unknown[]
      const quorum = await client.call('SENTINEL', 'CKQUORUM', set.name) as string
      return replicas.length === 1 && sentinels.length === 2 && quorum.startsWith('OK')
    }), 30_000)
    return set
  }

  /** REDIS_SENTINELS for the service. */
  get sentinelsSetting (): string {
    return this.#sentinels.map(({ port }) => `127.0.0.1:${port}`).join(',')
  }

  /** The port every Sentinel names as the primary's, or undefined while they disagree or cannot say. */
  async primaryPort (): Promise<number | undefined> {
    const ports = await Promise.all(this.#sentinels.map(({ port }) => ask(port, async (client) => {
      const address = await client.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.name) as [string, string] | null
      return address === null ? undefined : Number(address[1])
    }, this.password).catch(() => undefined)))
    return ports.every((port) => port === ports[0]) ? ports[0] : undefined
  }

  async end (): Promise<void> {
    const sentinels = this.#sentinels.splice(0)
    await Promise.all([
      ...sentinels.map(async ({ process }) => {
        process.kill('SIGKILL')
        await exited(process)
      }),
      this.primary.kill(),
      this.replica.kill()
    ])
  }

  async #startSentinel (): Promise<void> {
    const port = await freePort()
    // A Sentinel rewrites its configuration file as it learns the set: one file, and directory, each.
    const dir = tempDir('sentinel')
    const file = join(dir, 'sentinel.conf')
    writeFileSync(file, [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      'loglevel warning',
      `sentinel monitor ${this.name} 127.0.0.1 ${this.primary.port} 2`,
      `sentinel down-after-milliseconds ${this.name} ${SENTINEL_DOWN_AFTER_MS}`,
      `sentinel failover-timeout ${this.name} ${SENTINEL_FAILOVER_TIMEOUT_MS}`,
      `sentinel parallel-syncs ${this.name} 1`,
      // Sentinels sign in to each other with their own password: every one has the same.
      ...this.password === undefined ? [] : [`requirepass ${this.password}`],
      ''
    ].join('\n'))
    const child = spawn('redis-server', [file, '--sentinel'], { stdio: ['ignore', 'pipe', 'pipe'] })
    this.#sentinels.push({ port, process: child })
    await waitFor(`Sentinel on ${port}`, () => ask(port, async (client) => (await client.ping()) === 'PONG', this.password), 15_000, childReport(child, 'redis-server --sentinel'))
  }

  async #everySentinel (check: (client: Redis) => Promise<boolean>): Promise<boolean> {
    const results = await Promise.all(this.#sentinels.map(({ port }) => ask(port, check, this.password)))
    return results.every(Boolean)
  }
}

import { spawn, type ChildProcess } from 'node:child_process'
import { Redis } from 'ioredis'
import { freePort } from './ports.js'
import { exited, waitFor } from './processes.js'

/**
 * A redis-server of the test's own, on its own port, which the test may stop, hang or kill
 * by PID. The shared Redis is never touched.
 */
export class PrivateRedis {
  #process: ChildProcess | undefined
  private constructor (readonly port: number) {}

  static async start (): Promise<PrivateRedis> {
    const redis = new PrivateRedis(await freePort())
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

  async start (): Promise<void> {
    this.#process = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], { stdio: 'ignore' })
    await waitFor(`redis-server on ${this.port}`, async () => {
      const client = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
      client.on('error', () => {})
      try {
        await client.connect()
        return (await client.ping()) === 'PONG'
      } finally {
        client.disconnect()
      }
    })
  }

  hang (): void { process.kill(this.pid, 'SIGSTOP') }
  resume (): void { process.kill(this.pid, 'SIGCONT') }

  async kill (): Promise<void> {
    const child = this.#process
    if (child === undefined) return
    this.#process = undefined
    process.kill(child.pid as number, 'SIGCONT')
    child.kill('SIGKILL')
    await exited(child)
  }
}

import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process'
import { chownSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import pg from 'pg'
import { freePort } from './ports.js'
import { childReport, exited, waitFor } from './processes.js'
import { tempDir } from './app.js'

function postgresBinaries (): string {
  const versions = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a))
  if (versions[0] === undefined) throw new Error('No PostgreSQL installation under /usr/lib/postgresql')
  return `/usr/lib/postgresql/${versions[0]}/bin`
}

/** The process and all its descendants, read from /proc (backends call setsid, so a process group misses them). */
function processTree (root: number): number[] {
  const parentOf = new Map<number, number>()
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue
    try {
      // Fields after the parenthesised command name: state, ppid, ...
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      parentOf.set(Number(entry), ppid)
    } catch {
      // the process ended while we looked
    }
  }
  const tree = [root]
  for (let i = 0; i < tree.length; i++) {
    for (const [pid, ppid] of parentOf) if (ppid === tree[i]) tree.push(pid)
  }
  return tree
}

/** PostgreSQL and PgBouncer refuse to run as root: run them as the `postgres` user then. */
export function runAs (): Pick<SpawnOptions, 'uid' | 'gid'> {
  if (process.getuid?.() !== 0) return {}
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim())
  return { uid: id('-u'), gid: id('-g') }
}

/**
 * A PostgreSQL cluster of the test's own (initdb into a temp dir, own port), which the test may
 * hang (SIGSTOP to the postmaster and its backends), stop and start again. The shared one is never touched.
 */
export class PrivatePostgres {
  #process: ChildProcess | undefined
  private constructor (readonly port: number, readonly dataDir: string, readonly maxConnections: number) {}

  static async start ({ maxConnections = 50 }: { maxConnections?: number } = {}): Promise<PrivatePostgres> {
    const dataDir = tempDir('pg')
    const user = runAs()
    if (user.uid !== undefined && user.gid !== undefined) chownSync(dataDir, user.uid, user.gid)
    const init = spawnSync(`${postgresBinaries()}/initdb`, ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--no-sync'], { ...user, encoding: 'utf8' })
    if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`)
    const cluster = new PrivatePostgres(await freePort(), dataDir, maxConnections)
    await cluster.start()
    return cluster
  }

  get url (): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`
  }

  get pid (): number {
    if (this.#process?.pid === undefined) throw new Error('postgres is not running')
    return this.#process.pid
  }

  async start (): Promise<void> {
    this.#process = spawn(`${postgresBinaries()}/postgres`, [
      '-D', this.dataDir, '-p', String(this.port), '-k', this.dataDir,
      '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', `max_connections=${this.maxConnections}`
    ], { ...runAs(), stdio: ['ignore', 'pipe', 'pipe'] })
    const report = childReport(this.#process, 'postgres')
    await waitFor(`postgres on ${this.port}`, async () => {
      const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 1000 })
      try {
        await client.connect()
        return (await client.query('SELECT 1')).rowCount === 1
      } finally {
        await client.end().catch(() => {})
      }
    }, 15_000, report)
  }

  /** Stops the postmaster and its backends in their tracks: connections stay open, nothing answers. */
  hang (): void { this.#signalAll('SIGSTOP') }
  resume (): void { this.#signalAll('SIGCONT') }

  #signalAll (signal: NodeJS.Signals): void {
    for (const pid of processTree(this.pid)) {
      try {
        process.kill(pid, signal)
      } catch (error) {
        // A backend may end between listing and signalling.
        if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error
      }
    }
  }

  /** A fast shutdown: connections are closed and new ones refused. */
  async stop (): Promise<void> {
    const child = this.#process
    if (child === undefined) return
    this.#signalAll('SIGCONT')
    this.#process = undefined
    child.kill('SIGINT')
    await exited(child)
  }

  async destroy (): Promise<void> {
    await this.stop()
    rmSync(this.dataDir, { recursive: true, force: true })
  }
}

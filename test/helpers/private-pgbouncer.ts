import { spawn, type ChildProcess } from 'node:child_process'
import { chownSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import pg from 'pg'
import { SHARED_POSTGRES, tempDir } from './app.js'
import { findProgram } from './packages.js'
import { freePort } from './ports.js'
import { exited, waitFor } from './processes.js'
import { runAs } from './private-postgres.js'

const PGBOUNCER = findProgram('pgbouncer') ?? 'pgbouncer'

/**
 * A PgBouncer of the test's own in transaction pooling mode, on its own port, in front of one
 * database of the shared PostgreSQL (or of `server`, a private cluster's URL); ended by PID.
 * PgBouncer forwards no `options` startup parameter, so a schema picked by search_path cannot reach
 * the server through it: give it a database of its own. The server's user is its admin, who may
 * PAUSE and RESUME it.
 */
export class PrivatePgBouncer {
  #stderr = ''
  private constructor (readonly port: number, readonly database: string, readonly child: ChildProcess, readonly user: string) {}

  static async start ({ database, poolSize, server: serverUrl = SHARED_POSTGRES }: { database: string, poolSize: number, server?: string }): Promise<PrivatePgBouncer> {
    const server = new URL(serverUrl)
    const directory = tempDir('pgbouncer')
    const port = await freePort()
    // auth_type trust still wants the user in the auth file; the shared server trusts loopback.
    writeFileSync(join(directory, 'users.txt'), `"${server.username}" ""\n`)
    writeFileSync(join(directory, 'pgbouncer.ini'), [
      '[databases]',
      `${database} = host=${server.hostname} port=${server.port} dbname=${database}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(directory, 'users.txt')}`,
      `admin_users = ${server.username}`,
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      // After a failed login to the server (one restarting), PgBouncer waits this long before the next: 15 s by default.
      'server_login_retry = 1',
      ''
    ].join('\n'))
    const user = runAs()
    if (user.uid !== undefined && user.gid !== undefined) chownSync(directory, user.uid, user.gid)
    const child = spawn(PGBOUNCER, [join(directory, 'pgbouncer.ini')], { ...user, stdio: ['ignore', 'ignore', 'pipe'] })
    const bouncer = new PrivatePgBouncer(port, database, child, server.username)
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { bouncer.#stderr = (bouncer.#stderr + chunk).slice(-4000) })
    await waitFor(`pgbouncer on ${port}`, async () => {
      const client = new pg.Client({ connectionString: bouncer.url, connectionTimeoutMillis: 1000 })
      try {
        await client.connect()
        return (await client.query('SELECT 1')).rowCount === 1
      } finally {
        await client.end().catch(() => {})
      }
    }).catch(async (error: Error) => {
      await bouncer.stop()
      throw new Error(`${error.message}; pgbouncer said: ${bouncer.#stderr}`)
    })
    return bouncer
  }

  get url (): string {
    return `postgres://${this.user}@127.0.0.1:${this.port}/${this.database}`
  }

  /** PgBouncer's PAUSE (a planned switchover): waits for the transactions under way, then holds every new query until RESUME. */
  pause (): Promise<void> { return this.#admin('PAUSE') }
  resume (): Promise<void> { return this.#admin('RESUME') }

  async #admin (command: string): Promise<void> {
    const client = new pg.Client({ connectionString: `postgres://${this.user}@127.0.0.1:${this.port}/pgbouncer` })
    await client.connect()
    try {
      await client.query(command)
    } finally {
      await client.end()
    }
  }

  /** Immediate shutdown (SIGTERM): client and server connections are closed. */
  async stop (): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    this.child.kill('SIGTERM')
    await exited(this.child)
  }
}

import { createHash, randomUUID } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import pg from 'pg'
import type { FastifyInstance } from 'fastify'
import { build, type BuildOptions } from '../../app.js'
import { projectRoot } from '../../lib/project-root.js'
import type { Config, UpstreamSettingGroup } from '../../schemas/config.js'
import { loadConfig } from '../../settings.js'
import { startSandbox, type Sandbox, type SandboxOptions } from '../../dev/sandbox/index.js'
import { reportHangs } from './hang-report.js'
import { SHARED_REDIS, tempDir, testKeyPrefix } from './made.js'

export { tempDir, testKeyPrefix }

/**
 * The tests' database, named after the migrations it holds: a suite of another commit running beside
 * this one (another checkout, CI) whose migrations differ gets a database of its own, instead of
 * refusing the one this suite migrated ("checksum failed for migration").
 */
export const TEST_DATABASE = `portal_bff_test_${migrationsDigest()}`
export const SHARED_POSTGRES = 'postgres://postgres@127.0.0.1:5432'
export const TEST_DATABASE_URL = `${SHARED_POSTGRES}/${TEST_DATABASE}`

interface Teardown { teardown (fn: () => unknown): void }

function migrationsDigest (): string {
  const folder = join(projectRoot, 'migrations')
  const hash = createHash('sha256')
  for (const name of readdirSync(folder).sort()) hash.update(name).update(readFileSync(join(folder, name)))
  return hash.digest('hex').slice(0, 10)
}

let databaseReady: Promise<void> | undefined

/** Creates the tests' own database on the shared server once per process. */
export function ensureTestDatabase (): Promise<void> {
  databaseReady ??= (async () => {
    const client = new pg.Client({ connectionString: `${SHARED_POSTGRES}/postgres` })
    await client.connect()
    try {
      const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [TEST_DATABASE])
      if (rowCount === 0) {
        await client.query(`CREATE DATABASE ${TEST_DATABASE}`).catch((error: { code?: string }) => {
          // 42P04, or 23505 when another test process created it in the same instant.
          if (error.code !== '42P04' && error.code !== '23505') throw error
        })
      }
    } finally {
      await client.end()
    }
  })()
  return databaseReady
}

/** The environment of a test service: the tests' database, the shared Redis, logs in a temp dir. */
export function testEnv (overrides: Record<string, string> = {}): Record<string, string> {
  return {
    NODE_ENV: 'test',
    DATABASE_URL: TEST_DATABASE_URL,
    REDIS_URL: SHARED_REDIS,
    LOG_DIR: tempDir('logs'),
    LOG_LEVEL: 'info',
    REDIS_KEY_PREFIX: testKeyPrefix(),
    JWT_SECRET: 'test-secret-that-is-at-least-32-characters-long',
    // No balancer to wait for: a test that measures the delay sets it.
    SHUTDOWN_DELAY_MS: '0',
    ...overrides
  }
}

/** The settings of a test service; `upstreams`: the registry whose settings groups it reads (default the product's). */
export function testConfig (overrides: Record<string, string> = {}, upstreams?: readonly UpstreamSettingGroup[]): Config {
  return loadConfig(testEnv(overrides), upstreams).config
}

async function onTestDatabase (sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await client.connect()
  try {
    await client.query(sql)
  } finally {
    await client.end()
  }
}

/**
 * A schema of the test's own in the tests' database: each test app gets fresh tables, so ids
 * that simulators hand out again (billing order 1, say) never collide with another test's.
 */
export async function testSchemaUrl (t: Teardown): Promise<string> {
  const schema = `test_${randomUUID().replaceAll('-', '')}`
  await onTestDatabase(`CREATE SCHEMA ${schema}`)
  t.teardown(() => onTestDatabase(`DROP SCHEMA ${schema} CASCADE`))
  return `${TEST_DATABASE_URL}?options=${encodeURIComponent(`-c search_path=${schema}`)}`
}

/** Upstream simulators for one test, closed when the test ends. */
export async function startTestSandbox (t: Teardown, options?: SandboxOptions): Promise<Sandbox> {
  const sandbox = await startSandbox(options)
  t.teardown(() => sandbox.close())
  return sandbox
}

/**
 * Builds the app for one test, pointed at the given sandbox or a new one, and closes it when the
 * test ends. `options`: what else `build` takes (the pages to serve, an upstream registry of the
 * test's own, whose settings groups are read from the environment too).
 */
export async function buildTestApp (t: Teardown, overrides: Record<string, string> = {}, sandbox?: Sandbox, options: Omit<BuildOptions, 'config' | 'logToStdout'> = {}): Promise<FastifyInstance> {
  reportHangs()
  await ensureTestDatabase()
  const upstreams = sandbox ?? await startTestSandbox(t)
  const databaseUrl = overrides.DATABASE_URL ?? await testSchemaUrl(t)
  const config = testConfig({ ...upstreams.settings, DATABASE_URL: databaseUrl, ...overrides }, options.upstreams)
  const app = await build({ ...options, config, logToStdout: false })
  t.teardown(() => app.close())
  return app
}

/**
 * The first encapsulated scope of the app, root first, whose instance carries `decorator`: how a
 * test reaches what a feature scope keeps off the root (the orders scope's `orderReconciliation`).
 * Fastify offers no public way to a child instance, so this walks its list of children.
 */
export function scopeWith (app: FastifyInstance, decorator: string): FastifyInstance {
  const found = findScope(app, decorator)
  if (found === undefined) throw new Error(`no scope of the app carries ${decorator}`)
  return found
}

function findScope (instance: FastifyInstance, decorator: string): FastifyInstance | undefined {
  if (instance.hasDecorator(decorator)) return instance
  const children = Object.getOwnPropertySymbols(instance).find((symbol) => symbol.description === 'fastify.children')
  if (children === undefined) throw new Error('Fastify no longer keeps its children under the symbol this helper reads')
  for (const child of (instance as unknown as Record<symbol, FastifyInstance[]>)[children]!) {
    const found = findScope(child, decorator)
    if (found !== undefined) return found
  }
  return undefined
}

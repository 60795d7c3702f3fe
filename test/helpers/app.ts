import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import type { FastifyInstance } from 'fastify'
import { build } from '../../app.js'
import { loadConfig, type Config } from '../../lib/config.js'

export const TEST_DATABASE = 'portal_bff_test'
export const SHARED_POSTGRES = 'postgres://postgres@127.0.0.1:5432'
export const TEST_DATABASE_URL = `${SHARED_POSTGRES}/${TEST_DATABASE}`

interface Teardown { teardown (fn: () => unknown): void }

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
          if (error.code !== '42P04') throw error
        })
      }
    } finally {
      await client.end()
    }
  })()
  return databaseReady
}

export function tempDir (prefix: string): string {
  return mkdtempSync(join(tmpdir(), `portal-bff-${prefix}-`))
}

/** The environment of a test service: the tests' database, the shared Redis, logs in a temp dir. */
export function testEnv (overrides: Record<string, string> = {}): Record<string, string> {
  return {
    NODE_ENV: 'test',
    DATABASE_URL: TEST_DATABASE_URL,
    REDIS_URL: 'redis://127.0.0.1:6379',
    LOG_DIR: tempDir('logs'),
    LOG_LEVEL: 'info',
    JWT_SECRET: 'test-secret-that-is-at-least-32-characters-long',
    ...overrides
  }
}

export function testConfig (overrides: Record<string, string> = {}): Config {
  return loadConfig(testEnv(overrides)).config
}

/** Builds the app for one test and closes it when the test ends. */
export async function buildTestApp (t: Teardown, overrides: Record<string, string> = {}): Promise<FastifyInstance> {
  await ensureTestDatabase()
  const app = await build({ config: testConfig(overrides), logToStdout: false })
  t.teardown(() => app.close())
  return app
}

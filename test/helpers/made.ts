import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { Redis } from 'ioredis'
import tap from 'tap'

export const SHARED_REDIS = 'redis://127.0.0.1:6379'

// What this test file made on the machine and the shared Redis, removed when the file's tests have
// ended: the services it runs, in process or as children, have stopped by then.
const madeDirectories: string[] = []
const madeKeyPrefixes: string[] = []
let cleanupRegistered = false

function removeAtEnd (): void {
  if (cleanupRegistered) return
  cleanupRegistered = true
  tap.teardown(async () => {
    for (const directory of madeDirectories) rmSync(directory, { recursive: true, force: true })
    const redis = new Redis(SHARED_REDIS, { lazyConnect: true, maxRetriesPerRequest: 1 })
    try {
      await redis.connect()
      for (const prefix of madeKeyPrefixes) await removeKeys(redis, prefix)
    } finally {
      redis.disconnect()
    }
  })
}

async function removeKeys (redis: Redis, prefix: string): Promise<void> {
  let cursor = '0'
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500)
    if (keys.length > 0) await redis.del(...keys)
    cursor = next
  } while (cursor !== '0')
}

export function tempDir (prefix: string): string {
  const directory = mkdtempSync(join(tmpdir(), `portal-bff-${prefix}-`))
  madeDirectories.push(directory)
  removeAtEnd()
  return directory
}

/** The running test file's name (`auth` for auth.test.js): a key left behind names the file that made it. */
const fileName = basename(process.argv[1] ?? 'unknown').replace(/\.test\.js$/, '')

/** A key prefix of the test's own on the shared Redis; its keys are removed when the file ends. */
export function testKeyPrefix (): string {
  const prefix = `test:${fileName}:${randomUUID()}:`
  madeKeyPrefixes.push(prefix)
  removeAtEnd()
  return prefix
}

/** Every setting production requires, and nothing more. */
export const COMPLETE_PRODUCTION: Readonly<Record<string, string>> = {
  NODE_ENV: 'production',
  DATABASE_URL: 'postgres://db/portal',
  REDIS_URL: 'redis://cache:6379',
  BILLING_API_URL: 'https://billing.example/includes/api.php',
  BILLING_API_IDENTIFIER: 'id',
  BILLING_API_SECRET: 'secret',
  CRM_LOGIN_URL: 'https://login.example',
  CRM_CLIENT_ID: 'client',
  CRM_USERNAME: 'user@example.com',
  CRM_PRIVATE_KEY: '-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----',
  TELECOM_API_URL: 'https://telecom.example',
  TELECOM_API_KEY: 'key',
  JWT_SECRET: 'x'.repeat(32)
}

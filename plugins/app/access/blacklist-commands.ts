import type { Redis } from 'ioredis'
import type { Pool } from 'pg'

// The token blacklist's commands to PostgreSQL and Redis, each behind a typed function: the queries
// and scripts live here, the decisions of when to run them in TokenBlacklist (blacklist.ts).

// Rows outlive their tokens by this much, so that a database clock ahead of the service's never
// drops a revocation the service still needs.
const EXPIRY_MARGIN = '1 minute'
// The highest revocation number handed out: 0 before the first (a new sequence's last_value is its
// start, 1, before any number was taken).
const HIGHEST_NUMBER = 'SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS last FROM revoked_tokens_number'
const REFILL_CHUNK = 1000

/** Stores a revocation in PostgreSQL; answers its number. */
export async function insertRevocation (pool: Pool, jti: string, expiresAtSeconds: number): Promise<string> {
  const { rows } = await pool.query<{ number: string }>(
    `INSERT INTO revoked_tokens (jti, expires_at) VALUES ($1, to_timestamp($2))
     ON CONFLICT (jti) DO UPDATE SET expires_at = EXCLUDED.expires_at RETURNING number`,
    [jti, expiresAtSeconds])
  return rows[0]!.number
}

/** The highest revocation number PostgreSQL has handed out. */
export async function highestRevocationNumber (pool: Pool): Promise<string> {
  const { rows: [sequence] } = await pool.query<{ last: string }>(HIGHEST_NUMBER)
  return sequence!.last
}

/** The revocations of tokens not expired yet, with their expiry in seconds. */
export async function liveRevocations (pool: Pool): Promise<Array<{ jti: string, expires: string }>> {
  const { rows } = await pool.query<{ jti: string, expires: string }>(
    `SELECT jti, extract(epoch FROM expires_at)::bigint AS expires FROM revoked_tokens WHERE expires_at > now() - interval '${EXPIRY_MARGIN}'`)
  return rows
}

/** Forgets revocations of tokens that have expired. */
export async function deleteExpiredRevocations (pool: Pool): Promise<void> {
  await pool.query(`DELETE FROM revoked_tokens WHERE expires_at < now() - interval '${EXPIRY_MARGIN}'`)
}

// Stores one revocation and moves the epoch (the highest revocation number Redis holds) up to its
// number; an absent epoch stays absent, for Redis holds no revocation from before. Answers the epoch.
const REVOKE = `
redis.call('SET', KEYS[1], '1', 'EXAT', ARGV[1])
local epoch = tonumber(redis.call('GET', KEYS[2]))
if epoch == nil then return false end
if tonumber(ARGV[2]) > epoch then redis.call('SET', KEYS[2], ARGV[2]) return tonumber(ARGV[2]) end
return epoch`

/** Stores a revocation in Redis until its token expires; answers the epoch, or null when Redis holds none. */
export async function storeRevocation (
  redis: Redis,
  revokedKey: string,
  epochKey: string,
  expiresAtSeconds: number,
  number: string
): Promise<number | null> {
  const epoch = await redis.eval(REVOKE, 2, revokedKey, epochKey, String(expiresAtSeconds), number)
  return epoch === null ? null : Number(epoch)
}

// Forward only: instances refilling at once leave the highest of their epochs.
const ADVANCE_EPOCH = `
local epoch = tonumber(redis.call('GET', KEYS[1]))
if epoch == nil or tonumber(ARGV[1]) > epoch then redis.call('SET', KEYS[1], ARGV[1]) return tonumber(ARGV[1]) end
return epoch`

/** Moves the epoch up to `number`, never down; answers the epoch Redis then holds. */
export async function advanceEpoch (redis: Redis, epochKey: string, number: string): Promise<number> {
  return Number(await redis.eval(ADVANCE_EPOCH, 1, epochKey, number))
}

/** Writes revocations to Redis, each until its token expires, a chunk of commands at a time. */
export async function writeRevocations (
  redis: Redis,
  keyOf: (jti: string) => string,
  rows: Array<{ jti: string, expires: string }>
): Promise<void> {
  for (let start = 0; start < rows.length; start += REFILL_CHUNK) {
    const pipeline = redis.pipeline()
    for (const row of rows.slice(start, start + REFILL_CHUNK)) pipeline.set(keyOf(row.jti), '1', 'EXAT', row.expires)
    const failure = (await pipeline.exec())?.find(([error]) => error !== null)?.[0]
    if (failure != null) throw failure
  }
}

// The credential's revocation and the epoch, as MGET reads them; and, unless it is revoked, the
// request counted in its client's window as @fastify/rate-limit's Redis store counts it: the
// window starts at the first request and lasts ARGV[1] ms.
const LOOKUP_AND_COUNT = {
  numberOfKeys: 3,
  lua: `
local found = redis.call('MGET', KEYS[1], KEYS[2])
if found[1] then return found end
local current = redis.call('INCR', KEYS[3])
local ttl
if current == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
  ttl = tonumber(ARGV[1])
else
  ttl = redis.call('PTTL', KEYS[3])
end
return {found[1], found[2], current, ttl}`
}

/** The client's window to count the request in, with the credential's check (decision 0108). */
export interface CountIn { key: string, windowMs: number }

export type LookupAndCount = (
  revokedKey: string,
  epochKey: string,
  countKey: string,
  windowMs: number
) => Promise<[string | null, string | null, number?, number?]>

/** The token check that counts the request in the same command (decision 0108), defined on `redis`. */
export function defineLookupAndCount (redis: Redis): LookupAndCount {
  // A script of ioredis's: sent by its hash, its text only the first time a Redis lacks it.
  redis.defineCommand('blacklistLookupAndCount', LOOKUP_AND_COUNT)
  return (redis as unknown as { blacklistLookupAndCount: LookupAndCount }).blacklistLookupAndCount.bind(redis)
}

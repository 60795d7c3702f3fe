/**
 * Every Redis key, key prefix and pub/sub channel of the service, each under REDIS_KEY_PREFIX
 * (`prefix`): one place to see what the service keeps in Redis, and where two features could
 * collide. docs/architecture.md ("Where state lives") says what each holds.
 *
 * A key lives in the database of REDIS_URL; a channel is heard in every database of the server
 * (Redis pub/sub ignores the number), so each channel names the database too (`database`): two
 * deployments on one Redis meet on a channel only where they share every key as well (decision 0083).
 */

/** Billing reads, cache-aside: `<kind>:<key>` follows (`client:<id>`, `invoices:<client>:…`, `invoice:<id>`). */
export const servicesCachePrefix = (prefix: string) => `${prefix}services-cache:`

/** A revoked token or session id, until it would have expired. */
export const revokedKey = (prefix: string, jti: string) => `${prefix}auth:blacklist:${jti}`

/** The highest revocation number Redis holds: missing or behind, Redis lost revocations. */
export const revocationEpochKey = (prefix: string) => `${prefix}auth:blacklist-epoch`

/** Channel: each revocation's id, so that every instance ends the SSE streams opened with it. */
export const revocationChannel = (prefix: string, database: number) => `${prefix}db${database}:auth:revoked`

/** A live cookie session, by the hash of its cookie. */
export const sessionKey = (prefix: string, id: string) => `${prefix}session:${id}`

/** @fastify/rate-limit's counts: `client:<id>` or `ip:<address>` follows. */
export const rateLimitPrefix = (prefix: string) => `${prefix}rate-limit:`

/** Failed token checks per address. */
export const tokenFailuresPrefix = (prefix: string) => `${prefix}token-failures:`

/** Failed sign-ins per account (the hash of its email). */
export const signInFailuresPrefix = (prefix: string) => `${prefix}sign-in-failures:`

/** The CRM's daily API usage and limit, one figure for every instance. */
export const crmDailyUsageKey = (prefix: string) => `${prefix}crm:daily-usage`

/** The order reconciliation's run of rounds in a row that could not ask the CRM, whichever instance ran them. */
export const crmStatusRoundsKey = (prefix: string) => `${prefix}orders:crm-status-rounds`

/**
 * The platform-event subscription to `channel`: its lease, the last fencing token given with it,
 * the holder's report, the replay position and its floor, and another instance's request that the
 * holder subscribe again.
 */
export const subscriptionKeys = (prefix: string, channel: string) => ({
  lease: `${prefix}crm:pe:lease:${channel}`,
  fence: `${prefix}crm:pe:fence:${channel}`,
  resubscribe: `${prefix}crm:pe:resubscribe:${channel}`,
  state: `${prefix}crm:pe:state:${channel}`,
  replay: `${prefix}crm:pe:replay:${channel}`,
  floor: `${prefix}crm:pe:floor:${channel}`
})

/** BullMQ's prefix: the job queue's keys are `bull:provisioning:…`. */
export const jobQueuePrefix = (prefix: string) => `${prefix}bull`

/** Written once the jobs of orders awaiting provisioning are queued: missing, Redis lost them. */
export const jobsEpochKey = (prefix: string) => `${prefix}provisioning:epoch`

/** A client's last order status changes (a Redis stream), which `Last-Event-ID` resumes from. */
export const orderStatusBacklogKey = (prefix: string, clientId: number) => `${prefix}orders:events:${clientId}`

/** Channel: every order status change, for every instance's SSE streams. */
export const orderStatusChannel = (prefix: string, database: number) => `${prefix}db${database}:orders:status`

/**
 * An OpenID Connect sign-in under way: its PKCE verifier, state, nonce and return path, by the reference its
 * browser's cookie holds.
 */
export const oidcLoginKey = (prefix: string, reference: string) => `${prefix}oidc:login:${reference}`

/**
 * A person the provider signed in who acts for several billing clients, until they pick one, by the reference
 * its browser's cookie holds.
 */
export const oidcChoiceKey = (prefix: string, reference: string) => `${prefix}oidc:choice:${reference}`

/**
 * The cookie sessions begun in one session of the provider, by the hash of its `sid`: what a back-channel
 * logout for it ends.
 */
export const oidcSidSessionsKey = (prefix: string, hashedSid: string) => `${prefix}oidc:sid:${hashedSid}`

/** The cookie sessions one person began at the provider, by the hash of their `sub`. */
export const oidcSubSessionsKey = (prefix: string, hashedSub: string) => `${prefix}oidc:sub:${hashedSub}`

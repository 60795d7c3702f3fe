// @fastify/rate-limit ships its Redis store without a declaration of its own.
declare module '@fastify/rate-limit/store/RedisStore.js' {
  import type { FastifyRateLimitStore } from '@fastify/rate-limit'
  const RedisStore: new (continueExceeding: boolean, exponentialBackoff: boolean, redis: unknown, key?: string) => FastifyRateLimitStore
  export default RedisStore
}

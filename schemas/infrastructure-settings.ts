import { Type } from '@sinclair/typebox'
import { Milliseconds, Secret, Url } from '../lib/setting-schemas.js'

// The settings of the service's footing: its process, logs, health checks, PostgreSQL, Redis, shutdown
// and upstream calls. The first rows of the settings table (service-settings.ts), in its order.
export const infrastructureSettings = {
  NODE_ENV: Type.String({
    default: 'development',
    description: 'production: the database, Redis, upstream and JWT_SECRET settings become required, and the upstream sandbox never starts; any other value is a development run'
  }),
  PORT: Type.Integer({
    minimum: 0,
    maximum: 65535,
    default: 3000,
    description: 'TCP port the HTTP server listens on; 0 takes any free port'
  }),
  HOST: Type.String({
    minLength: 1,
    default: '127.0.0.1',
    description: 'address the HTTP server listens on; 0.0.0.0 (or ::) to take connections from other machines, as in a container'
  }),
  SERVICE_NAME: Type.String({
    minLength: 1,
    default: 'portal-bff',
    description: 'the service field of every log line, and the client name of the PostgreSQL and Redis connections'
  }),
  DATABASE_URL: Url('PostgreSQL connection URL'),
  REDIS_URL: Url('Redis connection URL'),
  REDIS_KEY_PREFIX: Type.String({
    pattern: '^[A-Za-z0-9:_.-]*$',
    default: '',
    description: 'prefix of every Redis key and pub/sub channel of the service; instances of one deployment share it. Deployments sharing one Redis server are kept apart, keys and channels alike, by a database of their own (REDIS_URL) or a prefix of their own'
  }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    {
      default: 'info',
      description: 'lowest level logged; debug adds the completion lines of the probes, silent logs nothing'
    }
  ),
  LOG_DIR: Type.String({
    minLength: 1,
    default: './logs',
    description: 'directory (created if missing) of combined.log, every line, and error.log, lines of level 50 and above; both reopened on SIGHUP, for logrotate'
  }),
  HEALTH_CHECK_TIMEOUT_MS: Milliseconds(1000, 'bound on one dependency check'),
  HEALTH_CHECK_CACHE_MS: Type.Integer({
    minimum: 0,
    maximum: 1000,
    default: 1000,
    description: 'how long a finished /health run is reused, so probes do not each hit the database; 0 reuses none (concurrent probes still share one run)'
  }),
  DATABASE_POOL_MAX: Type.Integer({
    minimum: 1,
    maximum: 200,
    default: 10,
    description: 'connections of the business pool (the health probe has its own); keep instances times this below PostgreSQL max_connections'
  }),
  DATABASE_CONNECT_TIMEOUT_MS: Milliseconds(
    2000,
    'how long a query waits for a pooled connection, and, at start, for PostgreSQL\'s first answer'
  ),
  DATABASE_QUERY_TIMEOUT_MS: Milliseconds(10_000, 'client-side bound on one query'),
  DATABASE_MIGRATION_TIMEOUT_MS: Milliseconds(
    30_000,
    'bound, at start, on the wait for another instance\'s migration (instances starting together migrate one at a time), and then on this one\'s own migration; past either the start fails, and the migration is rolled back'
  ),
  REDIS_COMMAND_TIMEOUT_MS: Milliseconds(1000, 'bound on one Redis command'),
  REDIS_SENTINELS: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'host:port,... of Redis Sentinels (a few, so that one down does not matter), given with REDIS_SENTINEL_NAME: every Redis connection asks them for the current primary and follows it when they fail over; REDIS_URL then gives only the user name, password and database number, its host is not used'
    })
  ),
  REDIS_SENTINEL_NAME: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'the name the Sentinels monitor the primary under (their sentinel monitor line), given with REDIS_SENTINELS'
    })
  ),
  REDIS_SENTINEL_PASSWORD: Type.Optional(
    Secret(
      'password of the Sentinels themselves (their requirepass), given with REDIS_SENTINELS; the primary\'s own credentials stay in REDIS_URL'
    )
  ),
  REDIS_ALLOW_VOLATILE: Type.Boolean({
    default: false,
    description: 'true lets the service start in production although Redis may evict keys (maxmemory-policy other than noeviction) or keeps nothing across a restart (appendonly no and no save points), with a warning: queued provisioning jobs, sign-in limits and rate-limit counters could be lost. Outside production either is only a warning'
  }),
  SHUTDOWN_DELAY_MS: Type.Integer({
    minimum: 0,
    maximum: 120_000,
    default: 5000,
    description: 'after SIGTERM, how long readiness answers 503 while requests are still served (with Connection: close), before the listener closes; set it above the balancer\'s time to mark an instance down (HAProxy inter x fall, a Kubernetes readiness period x failureThreshold)'
  }),
  SHUTDOWN_TIMEOUT_MS: Milliseconds(30_000, 'hard bound on a graceful shutdown'),
  UPSTREAM_TIMEOUT_MS: Milliseconds(5000, 'bound on one upstream HTTP call'),
  QUEUE_HEALTH_WINDOW_MS: Milliseconds(300_000, 'window over which queue failures and averages are judged'),
}

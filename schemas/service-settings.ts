import { Type, type Static } from '@sinclair/typebox'
import { Milliseconds, Origins, Secret, Url } from '../lib/setting-schemas.js'
import { infrastructureSettings } from './infrastructure-settings.js'

// Every setting the service reads, as the environment spells it, but the upstreams' settings
// groups (settingsSchema adds them). Values arrive as strings and are converted before they are
// checked, so a bad value is reported with its name.
export const ServiceSettingsSchema = Type.Object({
  ...infrastructureSettings,
  BILLING_PAYMENT_METHOD: Type.Optional(
    Type.String({
      pattern: '^[a-z0-9_]+$',
      description: 'WHMCS payment gateway module of new orders (an active one); unset: mailin, or the first gateway WHMCS names as valid'
    })
  ),
  CRM_PRIVATE_KEY_PATH: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'file holding the PEM RSA key for the JWT assertion, read once at start; CRM_PRIVATE_KEY wins when both are set'
    })
  ),
  CRM_API_VERSION: Type.String({
    pattern: '^[0-9]{2,3}\\.0$',
    default: '60.0',
    description: 'Salesforce API version of the REST and platform-event (CometD) calls; one the org supports'
  }),
  CRM_DAILY_API_LIMIT: Type.Optional(
    Type.Integer({
      minimum: 1,
      description: 'daily CRM API quota used until the CRM has reported its own, which then wins'
    })
  ),
  // An Account id: key prefix 001, 15 or 18 characters.
  CRM_ORDER_ACCOUNT_ID: Type.Optional(
    Type.String({
      pattern: '^001[A-Za-z0-9]{12}([A-Za-z0-9]{3})?$',
      description: 'the Account of the CRM orders the portal places'
    })
  ),
  CRM_EVENTS_ENABLED: Type.Boolean({
    default: false,
    description: 'true runs the platform-event subscription that starts provisioning (one instance holds it at a time); left unset while npm start serves an upstream from the sandbox, it is on'
  }),
  CRM_EVENTS_REPLAY: Type.Optional(
    Type.Union([Type.Literal('ALL'), Type.Literal('LATEST')], {
      description: 'where the subscription starts without a valid stored replay position: ALL replays every retained event, LATEST (or unset) takes new ones only'
    })
  ),
  CRM_ORDER_CANCELLED_STATUSES: Type.String({
    minLength: 1,
    default: 'Cancelled,Rejected',
    description: 'comma-separated CRM Order Status values that mean the order will not go on: the reconciliation cancels a portal order still in Pending Review whose CRM order has one, and its billing order and invoice. Neither Pending Review nor Activated'
  }),
  AUTH_BLACKLIST_FAIL_CLOSED: Type.Boolean({
    default: true,
    description: 'true: while Redis is down, bearer-token checks answer 503, as a revoked token cannot be told apart; false lets them pass (logged and counted)'
  }),
  PROVISIONING_CONCURRENCY: Type.Integer({
    minimum: 1,
    maximum: 200,
    default: 10,
    description: 'provisioning jobs run at once by one instance'
  }),
  PROVISIONING_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 50,
    default: 5,
    description: 'attempts of one provisioning job, the first included, before its order is Failed'
  }),
  PROVISIONING_BACKOFF_MS: Milliseconds(2000, 'first retry delay of a provisioning job; doubles each attempt'),
  // 2 s (decision 0092): a dead instance's jobs run again within 3 s, while a renewal may still come
  // 1.5 s late, several times the longest event-loop pause measured under load; a lock lost anyway
  // only repeats idempotent steps.
  PROVISIONING_LOCK_MS: Type.Integer({
    minimum: 1000,
    maximum: 600_000,
    default: 2000,
    description: 'lock of a running provisioning job, renewed about a quarter of it apart: a dead instance\'s jobs are taken over within this long and a half (the stalled-job check runs every quarter of it); a renewal later than three quarters of it (an event loop blocked, Redis not answering) lets another instance run the job again, which repeats no step\'s effect'
  }),
  // At most 22.5 s: a takeover comes within the lease and one renewal period (a quarter of it), and the
  // contract bounds it at 30 s. At least 1.5 s: a renewal (up to REDIS_COMMAND_TIMEOUT_MS, 1 s) must land
  // within three quarters of the lease; one that fails stops the holder at once. A holder paused past its
  // lease cannot write the replay position after the next holder began: the writes carry a fencing token
  // (decision 0091).
  CRM_EVENTS_LEASE_TTL_MS: Type.Integer({
    minimum: 1500,
    maximum: 22_500,
    default: 2000,
    description: 'the subscription lease, renewed every quarter of it: another instance takes over within this long and a quarter after the holder dies, and at once after a clean shutdown, which releases it. A failed renewal stops the holder at once; a holder paused past its lease writes nothing after the next one began (fencing token). Keep it above 4/3 of REDIS_COMMAND_TIMEOUT_MS'
  }),
  CRM_EVENTS_CONNECT_MARGIN_MS: Milliseconds(10_000, 'watchdog margin over the advised long-poll timeout'),
  ACCESS_TOKEN_TTL_SECONDS: Type.Integer({
    minimum: 60,
    maximum: 86_400,
    default: 900,
    description: 'lifetime of a portal access token (the expiresIn of POST /auth/login)'
  }),
  SESSION_IDLE_TIMEOUT_S: Type.Integer({
    minimum: 1,
    maximum: 604_800,
    default: 1800,
    description: 'a portal cookie session unused this long ends; an authenticated request that succeeds renews it, but GET /auth/session and GET /api/events (open or reopened) do not'
  }),
  SESSION_MAX_AGE_S: Type.Integer({
    minimum: 1,
    maximum: 2_592_000,
    default: 43_200,
    description: 'a portal cookie session ends this long after sign-in, however active'
  }),
  RATE_LIMIT_MAX: Type.Integer({ minimum: 1, default: 300, description: 'requests per client (or IP) per minute' }),
  LOGIN_RATE_LIMIT_MAX: Type.Integer({
    minimum: 1,
    default: 10,
    description: 'sign-in attempts per client address per minute'
  }),
  LOGIN_ACCOUNT_FAILURES_MAX: Type.Integer({
    minimum: 1,
    default: 5,
    description: 'failed sign-ins of one account, from any address, per LOGIN_ACCOUNT_WINDOW_MS; past it the account\'s sign-ins are refused without asking billing'
  }),
  LOGIN_ACCOUNT_WINDOW_MS: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    default: 900_000,
    description: 'the window failed sign-ins of one account are counted over'
  }),
  TOKEN_FAILURES_MAX: Type.Integer({
    minimum: 1,
    default: 30,
    description: 'failed access-token checks per client address per minute; past it the address is refused (429)'
  }),
  TRUST_PROXY: Type.Optional(
    Type.String({
      pattern: '^(true|false|[0-9]{1,2}|[0-9A-Fa-f:.,/ ]+)$',
      description: 'unset or false: the socket address is the client; true, a hop count, or a comma-separated list of proxy addresses/CIDRs: the client address is taken from X-Forwarded-For'
    })
  ),
  OPS_TOKEN: Type.Optional(
    Type.String({
      minLength: 16,
      description: 'bearer token of the operator endpoints (/metrics, /health/alerts, /status); unset, they are public'
    })
  ),
  SSE_MAX_STREAMS_PER_USER: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 5,
    description: 'open /api/events streams of one portal user on one instance'
  }),
  SSE_MAX_STREAMS: Type.Integer({
    minimum: 1,
    maximum: 100_000,
    default: 10_000,
    description: 'open /api/events streams of one instance'
  }),
  TRACE_PROBES: Type.Boolean({
    default: false,
    description: 'true traces the probe and operator routes too (/health*, /metrics, /status, /health/alerts, /auth/health-check, /api/health/services/cache) while tracing is on; false leaves them out: polled every few seconds, they would flood the trace backend'
  }),
  INTEGRATION_CHECK_CACHE_MS: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    default: 30_000,
    description: 'how long a finished GET /auth/health-check run is reused'
  }),
  ORDERS_PENDING_WARNING_S: Type.Integer({
    minimum: 1,
    maximum: 604_800,
    default: 900,
    description: 'how long the oldest order the CRM approved may wait in Pending Review here (since the reconciliation found it approved) before /health/alerts and the shipped rules warn; orders awaiting approval are never judged. Also the shortest time between two resubscriptions of the platform-event subscription'
  }),
  ORDERS_PENDING_CRITICAL_S: Type.Integer({
    minimum: 1,
    maximum: 604_800,
    default: 3600,
    description: 'the same, critical (the shipped rules page at it)'
  }),
  ORDERS_RECONCILE_INTERVAL_S: Type.Integer({
    minimum: 1,
    maximum: 86_400,
    default: 300,
    description: 'how often one instance reconciles the orders with the upstreams: it asks the CRM, in one query, the Status of up to 200 portal orders in Pending Review (provisioning those it approved, cancelling those it cancelled or rejected), and finishes or undoes (cancelling the billing order and its invoice) every order placement interrupted longer ago than its requests\' bounds (3 x DATABASE_QUERY_TIMEOUT_MS + 2 x BILLING_QUEUE_TIMEOUT_MS + 2 x CRM_QUEUE_TIMEOUT_MS)'
  }),
  ORDERS_IDEMPOTENCY_KEY_TTL_S: Type.Integer({
    minimum: 1,
    maximum: 2_592_000,
    default: 86_400,
    description: 'how long an Idempotency-Key of POST /api/orders is kept: the same key within it returns the first answer and never places a second order'
  }),
  ORDERS_PLACEMENT_RESUME_S: Type.Integer({
    minimum: 1,
    maximum: 2_592_000,
    default: 900,
    description: 'how long an order placement sent with an Idempotency-Key, interrupted after billing took the order (the CRM order not created), waits for a retry with its key, which completes it; nobody retrying, the reconciliation then cancels its billing order and invoice. Each retry that fails again starts the wait anew'
  }),
  REQUEST_RECEIVE_TIMEOUT_MS: Milliseconds(
    30_000,
    'the longest a client may take to send a whole request, headers and body'
  ),
  JWT_SECRET: Type.Optional(
    Type.String({
      minLength: 32,
      description: 'secret that signs portal access tokens (HS256), the same on every instance; unset outside production, a random one per start, with a warning'
    })
  ),
  OIDC_ISSUER: Type.Optional(
    Url(
      'the OpenID Connect provider\'s issuer URL (the billing system, or any certified provider): browsers sign in through it (GET /auth/oidc/login), its discovery document is read at start, and OIDC_CLIENT_ID and OIDC_CLIENT_SECRET become required. Unset: password sign-in only'
    )
  ),
  OIDC_CLIENT_ID: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'the service\'s client id at the OpenID Connect provider, given with OIDC_ISSUER; register <public origin>/auth/oidc/callback as its redirect URI, <public origin>/ as its post-logout redirect URI and <public origin>/auth/oidc/backchannel-logout as its back-channel logout URI (the public origin: the first of PUBLIC_ORIGIN, or the request\'s own origin)'
    })
  ),
  OIDC_CLIENT_SECRET: Type.Optional(
    Secret(
      'the service\'s client secret at the OpenID Connect provider, given with OIDC_ISSUER; it also keys the encryption of the ID tokens the service keeps, so every instance needs the same one'
    )
  ),
  OIDC_SCOPES: Type.String({
    pattern: '^([!#-\\[\\]-~]+ )*openid( [!#-\\[\\]-~]+)*$',
    default: 'openid profile email',
    description: 'space-separated scopes asked of the OpenID Connect provider; openid among them. The email claim maps the person to their billing client'
  }),
  PASSWORD_SIGN_IN: Type.Optional(
    Type.Boolean({
      description: 'whether POST /auth/session takes an email and password; unset: true without OIDC_ISSUER, false with it. POST /auth/login, for clients other than the browser app, takes one either way'
    })
  ),
  CORS_ORIGIN: Type.Optional(
    Origins(
      'comma-separated origins of portal pages on other origins (a sibling subdomain, a staging portal): CORS allows each, with credentials, and a cookie request from one passes the Origin check; unset, no cross-origin access at all'
    )
  ),
  PUBLIC_ORIGIN: Type.Optional(Origins('comma-separated origins at which browsers reach the service through a proxy (https://portal.example.com); a cookie request\'s Origin must be one of them, the request\'s own origin or one of CORS_ORIGIN. Unset, the request\'s own origin only, which is the proxy\'s when it keeps the Host (or sends X-Forwarded-Host) and X-Forwarded-Proto and TRUST_PROXY trusts it'))
})

export type Settings = Static<typeof ServiceSettingsSchema>

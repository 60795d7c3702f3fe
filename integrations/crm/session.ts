import { createPrivateKey, sign, type KeyObject } from 'node:crypto'
import { abortable } from '../../lib/abortable.js'
import { asRecord, brief, errorBody, type Upstream } from '../upstream.js'

/** What the REST and Streaming APIs need: a bearer token and the org's instance. */
export interface CrmSession {
  accessToken: string
  instanceUrl: string
}

const JWT_BEARER_GRANT = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
/** The longest assertion lifetime Salesforce accepts. */
const ASSERTION_LIFETIME_S = 180
const TOKEN_OPERATION = 'POST oauth2/token'

/** The settings a session is minted from: the OAuth server, the connected app and the integration user. */
export interface CrmSessionOptions {
  loginUrl: string
  audience?: string
  clientId: string
  username: string
  privateKey: string
}

/**
 * The CRM's sessions: OAuth 2.0 JWT bearer tokens, minted when asked for and none is held, one mint shared
 * by concurrent callers, and forgotten when the CRM refuses one.
 */
export class JwtBearerSessions {
  readonly #upstream: Upstream
  readonly #loginUrl: string
  readonly #audience: string
  readonly #clientId: string
  readonly #username: string
  readonly #privateKey: KeyObject
  /** The session, or the mint that will give it: concurrent callers share one mint. */
  #session: Promise<CrmSession> | undefined
  /** The session once minted, so that a refused one is recognised at once. */
  #current: CrmSession | undefined

  constructor (upstream: Upstream, options: CrmSessionOptions) {
    this.#upstream = upstream
    this.#loginUrl = options.loginUrl.replace(/\/+$/, '')
    this.#audience = options.audience ?? this.#loginUrl
    this.#clientId = options.clientId
    this.#username = options.username
    this.#privateKey = createPrivateKey(options.privateKey)
  }

  /** The current session, minted when there is none; concurrent callers share one mint. */
  session (signal?: AbortSignal): Promise<CrmSession> {
    if (this.#session === undefined) {
      const minting: Promise<CrmSession> = this.#mint().then(session => {
        if (this.#session === minting) this.#current = session
        return session
      })
      minting.catch(() => {
        if (this.#session === minting) this.#session = undefined
      })
      this.#session = minting
    }
    return signal === undefined ? this.#session : abortable(this.#session, signal)
  }

  /**
   * Forgets the session so that the next caller mints a new one. Given the session that was refused,
   * it leaves alone a session that has replaced it already, so that many refusals make one mint.
   */
  invalidate (refused?: CrmSession): void {
    if (refused !== undefined && this.#current?.accessToken !== refused.accessToken) return
    this.#session = undefined
    this.#current = undefined
  }

  #assertion (): string {
    const encode = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
    const claims = {
      iss: this.#clientId,
      sub: this.#username,
      aud: this.#audience,
      exp: Math.floor(Date.now() / 1000) + ASSERTION_LIFETIME_S
    }
    const unsigned = `${encode({ alg: 'RS256', typ: 'JWT' })}.${encode(claims)}`
    return `${unsigned}.${sign('RSA-SHA256', Buffer.from(unsigned), this.#privateKey).toString('base64url')}`
  }

  /** Bounded by its own deadline, not by the caller that started it: other callers may be waiting on it. */
  #mint (): Promise<CrmSession> {
    return this.#upstream.call(TOKEN_OPERATION, async (deadline) => {
      const response = await this.#upstream.send({
        url: `${this.#loginUrl}/services/oauth2/token`,
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams({ grant_type: JWT_BEARER_GRANT, assertion: this.#assertion() }).toString(),
        signal: deadline
      })
      if (response.status >= 500) throw this.#upstream.failure('http_5xx', `${TOKEN_OPERATION}: HTTP ${response.status}`)
      // A refusal is one whatever its body: OAuth's JSON error, or a proxy's page.
      if (response.status === 400 || response.status === 401) {
        const refusal = asRecord(errorBody(response.text))
        const reason = [refusal.error, refusal.error_description].filter(part => typeof part === 'string').join(': ')
        throw this.#upstream.failure('auth_failed', `${TOKEN_OPERATION}: ${brief(reason) || `HTTP ${response.status}`}`)
      }
      const { access_token: accessToken, instance_url: instanceUrl } = asRecord(
        this.#upstream.json(response, TOKEN_OPERATION)
      )
      if (
        response.status !== 200 ||
        typeof accessToken !== 'string' ||
        typeof instanceUrl !== 'string' ||
        !URL.canParse(instanceUrl)
      ) {
        throw this.#upstream.failure('upstream_error', `${TOKEN_OPERATION}: HTTP ${response.status} answer without a session`)
      }
      this.#upstream.log.info({ upstream: 'crm' }, 'minted a CRM access token')
      return { accessToken, instanceUrl: instanceUrl.replace(/\/+$/, '') }
    })
  }
}

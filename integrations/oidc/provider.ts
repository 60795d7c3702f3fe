import * as openid from 'openid-client'
import { createRemoteJWKSet, errors as joseErrors, jwtVerify } from 'jose'

export interface OidcProviderOptions {
  issuer: string
  clientId: string
  clientSecret: string
  scopes: string
  /** Bound on one request to the provider: discovery, the token exchange, its keys. */
  timeoutMs: number
}

/** What ties a callback to the sign-in this browser started. */
export interface AuthorizationChecks {
  codeVerifier: string
  state: string
  nonce: string
}

/** The person the provider signed in, from a validated ID token. */
export interface SignedInPerson {
  sub: string
  /** The provider's session, which a back-channel logout names. */
  sid: string | undefined
  email: string | undefined
  emailVerified: boolean | undefined
  name: string | undefined
  idToken: string
}

/** A logout token names the provider's session, its subject, or both. */
export interface LogoutTarget {
  sid: string | undefined
  sub: string | undefined
}

export const BACKCHANNEL_LOGOUT_EVENT = 'http://schemas.openid.net/event/backchannel-logout'
/** How old a logout token may be: one older is refused, so a captured one cannot be replayed much later. */
const LOGOUT_TOKEN_MAX_AGE = '5 minutes'
/** The provider's keys are asked for again at most this often when an unknown key id comes. */
const KEYS_COOLDOWN_MS = 30_000

/** A logout token that is not one the provider signed for this client, as Back-Channel Logout 1.0 describes it. */
export class InvalidLogoutTokenError extends Error {}

const isLoopback = (url: URL) => ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)

/**
 * The OpenID Connect provider, through the certified relying-party library openid-client: its
 * discovery document, the code flow with PKCE, and the ID token's validation (signature by the
 * provider's keys, which the library caches and fetches again when they rotate; iss, aud, exp,
 * nonce). Back-channel logout tokens are verified with jose against the same keys.
 */
export class OidcProvider {
  #configuration: openid.Configuration | undefined
  #keys: ReturnType<typeof createRemoteJWKSet> | undefined

  constructor (private readonly options: OidcProviderOptions) {}

  /** Whether the discovery document was read: until then no sign-in can start. */
  get discovered (): boolean {
    return this.#configuration !== undefined
  }

  /**
   * Reads the discovery document; rejects when the provider does not answer within the bound, or answers no valid one.
   */
  async discover (): Promise<void> {
    const { issuer, clientId, clientSecret, timeoutMs } = this.options
    const url = new URL(issuer)
    // Plain HTTP only to a provider on this machine (the tests' and the sandbox's): anywhere else
    // the library refuses it, as it should.
    const execute = [
      openid.enableNonRepudiationChecks,
      ...(url.protocol === 'http:' && isLoopback(url) ? [openid.allowInsecureRequests] : [])
    ]
    const timeout = Math.ceil(timeoutMs / 1000)
    const configuration = await openid.discovery(
      url,
      clientId,
      { client_secret: clientSecret },
      openid.ClientSecretBasic(clientSecret),
      { execute, timeout }
    )
    configuration.timeout = timeout
    const { jwks_uri: keysUrl } = configuration.serverMetadata()
    if (keysUrl === undefined) throw new Error('the discovery document names no jwks_uri')
    this.#keys = createRemoteJWKSet(new URL(keysUrl), {
      timeoutDuration: timeoutMs,
      cooldownDuration: KEYS_COOLDOWN_MS
    })
    this.#configuration = configuration
  }

  /** Where to send the browser, and the checks its return must pass. */
  async authorizationRequest (redirectUri: string): Promise<{ url: URL, checks: AuthorizationChecks }> {
    const codeVerifier = openid.randomPKCECodeVerifier()
    const checks = { codeVerifier, state: openid.randomState(), nonce: openid.randomNonce() }
    const url = openid.buildAuthorizationUrl(this.#discovered(), {
      redirect_uri: redirectUri,
      scope: this.options.scopes,
      code_challenge: await openid.calculatePKCECodeChallenge(codeVerifier),
      code_challenge_method: 'S256',
      state: checks.state,
      nonce: checks.nonce
    })
    return { url, checks }
  }

  /**
   * Exchanges the code of the callback at `callbackUrl` and validates the ID token; rejects with the library's error.
   */
  async signIn (callbackUrl: URL, checks: AuthorizationChecks): Promise<SignedInPerson> {
    const tokens = await openid.authorizationCodeGrant(this.#discovered(), callbackUrl, {
      pkceCodeVerifier: checks.codeVerifier,
      expectedState: checks.state,
      expectedNonce: checks.nonce,
      idTokenExpected: true
    })
    const fromIdToken = tokens.claims()!
    // A provider that keeps the profile out of the ID token (as the specification's code flow
    // suggests) answers it at its userinfo endpoint, for the same subject.
    const claims = fromIdToken.email === undefined
      ? { ...await openid.fetchUserInfo(this.#discovered(), tokens.access_token, fromIdToken.sub), ...fromIdToken }
      : fromIdToken
    const text = (value: unknown) => typeof value === 'string' && value !== '' ? value : undefined
    return {
      sub: claims.sub,
      sid: text(claims.sid),
      email: text(claims.email),
      emailVerified: typeof claims.email_verified === 'boolean' ? claims.email_verified : undefined,
      name: text(claims.name),
      idToken: tokens.id_token!
    }
  }

  /** The provider's end-session URL (RP-Initiated Logout 1.0), or undefined when it has none. */
  endSessionUrl (idToken: string | undefined, postLogoutRedirectUri: string): string | undefined {
    const configuration = this.#discovered()
    if (configuration.serverMetadata().end_session_endpoint === undefined) return undefined
    return openid.buildEndSessionUrl(configuration, {
      client_id: this.options.clientId,
      post_logout_redirect_uri: postLogoutRedirectUri,
      ...(idToken === undefined ? {} : { id_token_hint: idToken })
    }).href
  }

  /**
   * The sessions a logout token ends; rejects with InvalidLogoutTokenError for any token Back-Channel Logout
   * 1.0 refuses.
   */
  async verifyLogoutToken (token: string): Promise<LogoutTarget> {
    const configuration = this.#discovered()
    const { payload } = await jwtVerify(token, this.#keys!, {
      issuer: configuration.serverMetadata().issuer,
      audience: this.options.clientId,
      requiredClaims: ['iat', 'jti', 'events'],
      maxTokenAge: LOGOUT_TOKEN_MAX_AGE
    }).catch((error: unknown) => {
      // A provider whose keys cannot be fetched is no fault of the token.
      if (error instanceof joseErrors.JOSEError && !(error instanceof joseErrors.JWKSTimeout)) {
        throw new InvalidLogoutTokenError(error.code, { cause: error })
      }
      throw error
    })
    const events = payload.events as Record<string, unknown> | undefined
    const event = typeof events === 'object' && events !== null ? events[BACKCHANNEL_LOGOUT_EVENT] : undefined
    if (typeof event !== 'object' || event === null) throw new InvalidLogoutTokenError('no back-channel logout event')
    if ('nonce' in payload) throw new InvalidLogoutTokenError('a logout token carries no nonce')
    const sid = typeof payload.sid === 'string' ? payload.sid : undefined
    if (sid === undefined && payload.sub === undefined) throw new InvalidLogoutTokenError('neither sid nor sub')
    return { sid, sub: payload.sub }
  }

  #discovered (): openid.Configuration {
    if (this.#configuration === undefined) throw new Error('the provider\'s discovery document has not been read')
    return this.#configuration
  }
}

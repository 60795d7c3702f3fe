import { createHash, randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import type {
  AuthorizationChecks, LogoutTarget, OidcProvider, SignedInPerson
} from '../../../../integrations/oidc/provider.js'
import { AuthUnavailableError } from '../../../../lib/errors.js'
import type { Sealer } from '../../../../lib/sealed.js'
import type { Session, SessionStore } from '../sessions.js'
import { oidcChoiceKey, oidcLoginKey, oidcSidSessionsKey, oidcSubSessionsKey } from '../../redis-keys.js'

/** How long a browser has at the provider to sign in: past it, the callback finds no sign-in under way. */
export const LOGIN_TTL_S = 600

/** A sign-in under way, as Redis keeps it under the reference its browser's cookie holds. */
export interface PendingLogin extends AuthorizationChecks {
  returnTo: string
}

/** A billing client a person acts for, as the chooser lists it. */
export interface ActingClient {
  clientId: number
  name: string | null
}

/** A person the provider signed in, as a session keeps them: their ID token sealed. */
export interface SignedIn {
  sub: string
  sid: string | undefined
  name: string | undefined
  email: string
  sealedIdToken: string
}

/** A person who acts for several billing clients, until they pick one. */
export interface PendingChoice {
  person: SignedIn
  clients: ActingClient[]
  returnTo: string
}

export interface OidcSignInOptions {
  provider: OidcProvider
  redis: Redis
  prefix: string
  sessions: SessionStore
  /** Seals the ID token a session keeps: never in the clear at rest (decision 0102). */
  sealer: Sealer
  maxAgeMs: number
}

const hashed = (value: string) => createHash('sha256').update(value).digest('base64url')

/** A choice or a session's record that Redis could not read or store: answered as the sessions' store answers it. */
const unavailable = (error: unknown): never => {
  throw new AuthUnavailableError({ cause: error })
}

/**
 * The service's side of the OpenID Connect sign-in: what binds a callback to the browser that
 * began it (a reference in an HttpOnly cookie to its checks in Redis, used once), and which
 * cookie sessions each provider session began, so that a back-channel logout can end them.
 */
export class OidcSignIn {
  constructor (readonly options: OidcSignInOptions) {}

  get provider (): OidcProvider {
    return this.options.provider
  }

  /** Starts a sign-in: answers the provider's URL and the reference the browser's cookie keeps. */
  async begin (redirectUri: string, returnTo: string): Promise<{ url: URL, reference: string }> {
    const { url, checks } = await this.provider.authorizationRequest(redirectUri)
    const reference = randomBytes(32).toString('base64url')
    const pending: PendingLogin = { ...checks, returnTo }
    await this.options.redis.set(
      oidcLoginKey(this.options.prefix, reference),
      JSON.stringify(pending),
      'EX',
      LOGIN_TTL_S
    )
    return { url, reference }
  }

  /** The sign-in a cookie's reference names, taken once: a second callback with it finds none. */
  async take (reference: string | undefined): Promise<PendingLogin | undefined> {
    if (reference === undefined) return undefined
    const value = await this.options.redis.getdel(oidcLoginKey(this.options.prefix, reference))
    return value === null ? undefined : JSON.parse(value) as PendingLogin
  }

  /** Keeps a person's choice among their clients for the browser, under a new reference its cookie holds. */
  async offerChoice (choice: PendingChoice): Promise<string> {
    const reference = randomBytes(32).toString('base64url')
    await this.options.redis.set(
      oidcChoiceKey(this.options.prefix, reference),
      JSON.stringify(choice),
      'EX',
      LOGIN_TTL_S
    )
    return reference
  }

  /** The choice a cookie's reference names, left in place. */
  async choice (reference: string | undefined): Promise<PendingChoice | undefined> {
    if (reference === undefined) return undefined
    const value = await this.options.redis.get(oidcChoiceKey(this.options.prefix, reference)).catch(unavailable)
    return value === null ? undefined : JSON.parse(value) as PendingChoice
  }

  /** Takes the choice once: of two requests choosing at once, one finds it. */
  async takeChoice (reference: string): Promise<boolean> {
    return await this.options.redis.del(oidcChoiceKey(this.options.prefix, reference)).catch(unavailable) === 1
  }

  /** Remembers which provider session and person began a cookie session. */
  async record (session: Session, { sid, sub }: Pick<SignedInPerson, 'sid' | 'sub'>): Promise<void> {
    const member = `${session.id}:${session.expiresAt}`
    const transaction = this.options.redis.multi()
    for (const key of this.#keysOf({ sid, sub })) transaction.sadd(key, member).pexpire(key, this.options.maxAgeMs)
    const results = await transaction.exec().catch(unavailable)
    // A command refused inside the transaction is in its results, not a rejection.
    const refused = results?.find(([error]) => error !== null)
    if (refused !== undefined) unavailable(refused[0])
  }

  /**
   * Ends, on every instance, the cookie sessions a logout token names: those of its provider
   * session, or without one, every one of its person. Answers how many.
   */
  async end ({ sid, sub }: LogoutTarget): Promise<number> {
    const keys = this.#keysOf(sid === undefined ? { sid, sub } : { sid, sub: undefined })
    const members = new Set((await Promise.all(keys.map((key) => this.options.redis.smembers(key)))).flat())
    for (const member of members) {
      const [id, expiresAt] = member.split(':')
      await this.options.sessions.end({ id: id!, expiresAt: Number(expiresAt) })
    }
    await this.options.redis.del(...keys)
    return members.size
  }

  /**
   * The provider's end-session URL, naming this client but not the session's ID token: the page
   * navigates to it, and no token of the provider reaches the browser (decision 0102).
   */
  logoutUrl (postLogoutRedirectUri: string): string | undefined {
    return this.provider.endSessionUrl(undefined, postLogoutRedirectUri)
  }

  #keysOf ({ sid, sub }: LogoutTarget): string[] {
    const { prefix } = this.options
    return [
      ...(sid === undefined ? [] : [oidcSidSessionsKey(prefix, hashed(sid))]),
      ...(sub === undefined ? [] : [oidcSubSessionsKey(prefix, hashed(sub))])
    ]
  }
}

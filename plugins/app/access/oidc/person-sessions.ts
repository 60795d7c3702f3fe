// What the callback and the choice of a client do with a person the provider vouched for: a session for
// the one billing client they act for, or the choice among several.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { SignInError } from '../../../../schemas/auth.js'
import { LOGIN_TTL_S, type ActingClient, type OidcSignIn, type SignedIn } from './sign-in.js'
import type { Session } from '../sessions.js'

/**
 * The cookie that binds a person's choice among their billing clients to their browser. Strict: only the
 * page's own requests read it.
 */
export const CHOICE_COOKIE = '__Host-portal-oidc-choice'

/** The choice cookie's Set-Cookie header: the reference, or (none) its clearing. */
export function choiceCookie (fastify: FastifyInstance, reference?: string): string {
  return fastify.serializeCookie(CHOICE_COOKIE, reference ?? '', {
    path: '/',
    httpOnly: true,
    secure: true,
    sameSite: 'strict',
    maxAge: reference === undefined ? 0 : LOGIN_TTL_S
  })
}

/**
 * Signs in a person the provider vouched for: the billing client they act for gets a session; a
 * person who acts for several is offered the choice (decision 0101). Answers the failure, if any.
 */
export async function signInPerson (
  signIn: OidcSignIn,
  request: FastifyRequest,
  reply: FastifyReply,
  person: Awaited<ReturnType<OidcSignIn['provider']['signIn']>>,
  returnTo: string,
  heldCookie: string | undefined
): Promise<SignInError | 'choose' | undefined> {
  const fastify = request.server
  if (person.email === undefined || person.emailVerified === false) return 'email_unverified'
  const email = person.email
  try {
    const clients = await fastify.upstreams.billing.queue.run((deadline) =>
      fastify.upstreams.billing.client.clientsActingFor(email, deadline)
    )
    if (clients.length === 0) return 'no_client_account'
    const signedIn: SignedIn = {
      sub: person.sub,
      sid: person.sid,
      name: person.name,
      email,
      sealedIdToken: signIn.options.sealer.seal(person.idToken)
    }
    if (clients.length > 1) {
      const reference = await signIn.offerChoice({ person: signedIn, clients, returnTo })
      reply.header('set-cookie', choiceCookie(fastify, reference))
      return 'choose'
    }
    const { cookie } = await startSession(signIn, fastify, signedIn, clients[0]!, heldCookie)
    reply.header('set-cookie', fastify.sessionCookieHeader(cookie))
    return undefined
  } catch (error) {
    request.log.warn({ err: error }, 'OpenID Connect sign-in: no session could be started')
    return 'unavailable'
  }
}

/**
 * Starts the cookie session of a signed-in person for one client; the session the browser's cookie held ends
 * (decision 0090). Answers the session and its cookie's value, which the caller sets once the sign-in is
 * complete: a session whose cookie is never set is one no browser holds.
 */
export async function startSession (
  signIn: OidcSignIn,
  fastify: FastifyInstance,
  person: SignedIn,
  client: ActingClient,
  heldCookie: string | undefined
): Promise<{ cookie: string, session: Session }> {
  await fastify.sessions.endHeldBy(heldCookie)
  const started = await fastify.sessions.start(client.clientId, {
    signIn: 'oidc',
    name: person.name ?? client.name,
    email: person.email,
    sealedIdToken: person.sealedIdToken
  })
  await signIn.record(started.session, person)
  return started
}

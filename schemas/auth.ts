import { Type } from '@sinclair/typebox'

/**
 * An email address as sign-in checks it, stated as a pattern so that the document and the server
 * hold one rule (a `format: email` meant one thing to Ajv and another to clients' generators): one
 * `@`, no space or control character, a dot in the domain. Billing judges the rest; addresses
 * with non-ASCII characters (RFC 6531) are taken, as billing may hold them.
 */
const EMAIL_PATTERN = String.raw`^[^\s@\x00-\x1f\x7f]+@[^\s@\x00-\x1f\x7f]+\.[^\s@\x00-\x1f\x7f]+$`

export const LoginRequest = Type.Object({
  email: Type.String({
    pattern: EMAIL_PATTERN,
    maxLength: 254,
    description: 'an email address: one `@`, no space or control character, a dot in the domain; non-ASCII characters are taken'
  }),
  password: Type.String({ minLength: 1, maxLength: 256 })
}, {
  $id: 'LoginRequest',
  additionalProperties: false,
  // The upstream sandbox's account: "Try it out" in /docs signs in against a service that runs on it.
  examples: [{ email: 'jane@example.com', password: 'correct-horse' }]
})

export const AccessToken = Type.Object({
  accessToken: Type.String({
    description: 'send it as `Authorization: Bearer <accessToken>`; in /docs, paste it into Authorize (bearerAuth)'
  }),
  expiresIn: Type.Integer({ description: 'seconds' }),
  tokenType: Type.Literal('Bearer')
}, {
  $id: 'AccessToken',
  additionalProperties: false,
  examples: [{
    accessToken: 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxIiwianRpIjoiMGI2ZTVlMzYtNWE1Mi00ZjQzLTlkMWMtN2MyZjRhOGU5YjEwIiwiaWF0IjoxNzM1NzI1NjAwLCJleHAiOjE3MzU3MjY1MDB9.3q2H0mB7Vq9d3sWqK8vXy1cZ0rT5uN6aE4fG7hJ2kLs',
    expiresIn: 900,
    tokenType: 'Bearer'
  }]
})

export const SessionInfo = Type.Object({
  clientId: Type.Integer({ description: 'the billing client the session acts for' }),
  name: Type.Union([Type.String(), Type.Null()], {
    description: 'the signed-in person\'s name: the identity provider\'s `name` claim, or the billing client\'s first and last name after a password sign-in; null when neither says'
  }),
  email: Type.Union([Type.String(), Type.Null()], {
    description: 'the email the person signed in with (the provider\'s verified `email` claim); null for a session begun before the service kept it'
  }),
  signIn: Type.Union([Type.Literal('password'), Type.Literal('oidc')], {
    description: 'how the session began: with an email and password (POST /auth/session), or at the OpenID Connect provider (GET /auth/oidc/login)'
  }),
  expiresAt: Type.String({
    format: 'date-time',
    description: 'when the session ends however active: sign-in plus `SESSION_MAX_AGE_S`'
  }),
  idleExpiresAt: Type.String({
    format: 'date-time',
    description: 'when the session ends if it is not used before: any authenticated request but GET /auth/session moves it on, to at most `expiresAt`'
  })
}, {
  $id: 'SessionInfo',
  additionalProperties: false,
  examples: [
    {
      clientId: 1,
      name: 'Jane Doe',
      email: 'jane@example.com',
      signIn: 'oidc',
      expiresAt: '2026-11-27T08:00:00.000Z',
      idleExpiresAt: '2026-11-26T20:30:00.000Z'
    }
  ]
})

/** A path on this site: one `/`, never `//` or a backslash, which browsers would take for another host. */
const LOCAL_PATH = String.raw`^/(?![/])[\x21-\x5b\x5d-\x7e]*$`

export const OidcLoginQuery = Type.Object({
  returnTo: Type.String({
    pattern: LOCAL_PATH,
    maxLength: 2048,
    default: '/',
    description: 'the path on this site the browser comes back to, signed in or with `?signInError=<code>`; never another host'
  })
}, { additionalProperties: false })

// The provider may add parameters of its own (iss, session_state): they are taken, and not used.
export const OidcCallbackQuery = Type.Object({
  code: Type.Optional(Type.String({ maxLength: 4096 })),
  state: Type.Optional(Type.String({ maxLength: 1024 })),
  error: Type.Optional(Type.String({ maxLength: 256 }))
}, { additionalProperties: Type.String({ maxLength: 4096 }) })

export const SIGN_IN_ERRORS = [
  'login_expired',
  'state_mismatch',
  'provider_refused',
  'token_refused',
  'email_unverified',
  'no_client_account',
  'unavailable'
] as const
export type SignInError = typeof SIGN_IN_ERRORS[number]

export const SignInMethods = Type.Object({
  password: Type.Boolean({ description: 'POST /auth/session takes an email and password (`PASSWORD_SIGN_IN`)' }),
  oidc: Type.Boolean({
    description: 'an OpenID Connect provider is configured (`OIDC_ISSUER`): navigate to GET /auth/oidc/login to sign in there'
  })
}, {
  $id: 'SignInMethods',
  additionalProperties: false,
  examples: [{ password: false, oidc: true }]
})

export const ClientChoice = Type.Object({
  name: Type.Union([Type.String(), Type.Null()], {
    description: 'the signed-in person\'s name, as the provider says it'
  }),
  email: Type.String({ description: 'the provider\'s verified email of the person' }),
  clients: Type.Array(Type.Object({
    clientId: Type.Integer({ description: 'the billing client\'s id: send it to POST /auth/oidc/choice' }),
    name: Type.Union([Type.String(), Type.Null()], { description: 'the client\'s first and last name at billing' })
  }, { additionalProperties: false }), {
    minItems: 2,
    description: 'the billing clients the person acts for, the ones they own first'
  })
}, {
  $id: 'ClientChoice',
  additionalProperties: false,
  examples: [
    {
      name: 'John Smith',
      email: 'john@example.com',
      clients: [
        { clientId: 2, name: 'John Smith' },
        { clientId: 3, name: 'Nina Newcomer' }
      ]
    }
  ]
})

export const ChooseClientRequest = Type.Object({
  clientId: Type.Integer({ minimum: 1, description: 'one of the `clients` GET /auth/oidc/choice lists' })
}, { $id: 'ChooseClientRequest', additionalProperties: false, examples: [{ clientId: 3 }] })

export const BackchannelLogoutRequest = Type.Object({
  logout_token: Type.String({
    minLength: 1,
    maxLength: 16_384,
    description: 'the provider\'s signed logout token (OpenID Connect Back-Channel Logout 1.0)'
  })
}, { additionalProperties: false })

export const LogoutAnswer = Type.Object({
  logoutUrl: Type.String({
    description: 'the provider\'s end-session URL: navigate the page to it to sign out at the provider too (RP-Initiated Logout)'
  })
}, {
  $id: 'LogoutAnswer',
  additionalProperties: false,
  examples: [{ logoutUrl: 'https://billing.example.com/oauth/logout?client_id=portal-bff&post_logout_redirect_uri=https%3A%2F%2Fportal.example.com%2F' }]
})

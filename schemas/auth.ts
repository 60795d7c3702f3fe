import { Type } from '@sinclair/typebox'

/**
 * An email address as sign-in checks it, stated as a pattern so that the document and the server
 * hold one rule (a `format: email` meant one thing to Ajv and another to clients' generators): one
 * `@`, no space or control character, a dot in the domain. Billing judges the rest; addresses
 * with non-ASCII characters (RFC 6531) are taken, as billing may hold them.
 */
const EMAIL_PATTERN = String.raw`^[^\s@\x00-\x1f\x7f]+@[^\s@\x00-\x1f\x7f]+\.[^\s@\x00-\x1f\x7f]+$`

export const LoginRequest = Type.Object({
  email: Type.String({ pattern: EMAIL_PATTERN, maxLength: 254, description: 'an email address: one `@`, no space or control character, a dot in the domain; non-ASCII characters are taken' }),
  password: Type.String({ minLength: 1, maxLength: 256 })
}, {
  $id: 'LoginRequest',
  additionalProperties: false,
  // The upstream sandbox's account: "Try it out" in /docs signs in against a service that runs on it.
  examples: [{ email: 'jane@example.com', password: 'correct-horse' }]
})

export const AccessToken = Type.Object({
  accessToken: Type.String({ description: 'send it as `Authorization: Bearer <accessToken>`; in /docs, paste it into Authorize (bearerAuth)' }),
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
  expiresAt: Type.String({ format: 'date-time', description: 'when the session ends however active: sign-in plus `SESSION_MAX_AGE_S`' }),
  idleExpiresAt: Type.String({ format: 'date-time', description: 'when the session ends if it is not used before: any authenticated request but GET /auth/session moves it on, to at most `expiresAt`' })
}, {
  $id: 'SessionInfo',
  additionalProperties: false,
  examples: [{ clientId: 1, expiresAt: '2026-11-27T08:00:00.000Z', idleExpiresAt: '2026-11-26T20:30:00.000Z' }]
})

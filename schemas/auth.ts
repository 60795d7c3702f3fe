import { Type } from '@sinclair/typebox'

export const LoginRequest = Type.Object({
  email: Type.String({ format: 'email', maxLength: 254 }),
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

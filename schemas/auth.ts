import { Type } from '@sinclair/typebox'

export const LoginRequest = Type.Object({
  email: Type.String({ format: 'email', maxLength: 254 }),
  password: Type.String({ minLength: 1, maxLength: 256 })
}, { $id: 'LoginRequest', additionalProperties: false })

export const AccessToken = Type.Object({
  accessToken: Type.String(),
  expiresIn: Type.Integer({ description: 'seconds' }),
  tokenType: Type.Literal('Bearer')
}, { $id: 'AccessToken', additionalProperties: false })

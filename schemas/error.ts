import { Type, type Static } from '@sinclair/typebox'

export const ErrorResponse = Type.Object({
  statusCode: Type.Integer({ minimum: 400, maximum: 599 }),
  error: Type.String({ description: 'HTTP reason phrase' }),
  message: Type.String(),
  code: Type.String({ description: 'stable machine-readable code' }),
  correlationId: Type.String()
}, { $id: 'ErrorResponse', title: 'Error', additionalProperties: false })

export type ErrorResponse = Static<typeof ErrorResponse>

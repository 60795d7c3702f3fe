import { OptionalKind, Type, type Static, type TSchema } from '@sinclair/typebox'

/**
 * A query parameter the client may leave out, for which validation fills in `value` (Fastify's Ajv
 * applies defaults). Marked optional as `Type.Optional` marks it, so that the object leaves it out
 * of `required` and the OpenAPI document does not mark it required; typed as the schema itself,
 * so that the handler's static type has it, as the handler always receives it.
 */
export function WithDefault<T extends TSchema> (schema: T, value: Static<T>): T {
  return { ...schema, default: value, [OptionalKind]: 'Optional' }
}

/** Which page of a list to answer: left out, the first, of 25. */
export const pageQueryProperties = {
  page: WithDefault(Type.Integer({ minimum: 1, maximum: 10_000, description: 'the page, from 1' }), 1),
  limit: WithDefault(Type.Integer({ minimum: 1, maximum: 100, description: 'items per page' }), 25)
}

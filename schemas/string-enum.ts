import { Type, type SchemaOptions, type TUnsafe } from '@sinclair/typebox'

/**
 * One of a fixed list of strings, as `{ type: 'string', enum }` rather than TypeBox's union of
 * literals: fast-json-stringify serializes an `anyOf` by validating the value against each branch
 * on every response, and a string enum as a plain string. The OpenAPI document lists the values alike.
 */
export function StringEnum<const Values extends readonly string[]> (
  values: Values,
  options: SchemaOptions = {}
): TUnsafe<Values[number]> {
  return Type.Unsafe<Values[number]>({ ...options, type: 'string', enum: [...values] })
}

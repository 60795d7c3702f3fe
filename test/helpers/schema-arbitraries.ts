import fc from 'fast-check'
import type { OpenApiDocument, Schema } from './openapi.js'

/**
 * fast-check arbitraries from the JSON Schemas of an OpenAPI document: values a schema accepts, and
 * hostile values of the kinds clients get wrong (a number past every bound, a wrong type, a field
 * too many or missing). Only the keywords the service's schemas use are read.
 */
export class SchemaArbitraries {
  constructor (private readonly document: OpenApiDocument) {}

  resolve (schema: Schema): Schema {
    const ref = schema.$ref
    if (typeof ref !== 'string') return schema
    const name = ref.replace('#/components/schemas/', '')
    const target = this.document.components.schemas[name]
    if (target === undefined) throw new Error(`no component ${ref}`)
    return this.resolve(target)
  }

  /** Values the schema accepts, as JSON would carry them. */
  valid (raw: Schema): fc.Arbitrary<unknown> {
    const schema = this.resolve(raw)
    if ('const' in schema) return fc.constant(schema.const)
    if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum as unknown[])
    const union = (schema.anyOf ?? schema.oneOf) as Schema[] | undefined
    if (union !== undefined) return fc.oneof(...union.map((member) => this.valid(member)))
    const value = this.#validOfType(schema)
    return schema.nullable === true ? fc.option(value, { nil: null }) : value
  }

  #validOfType (schema: Schema): fc.Arbitrary<unknown> {
    const { minimum, maximum, minLength, maxLength, pattern, format } = schema as Record<string, number | string | undefined>
    switch (schema.type) {
      case 'integer': return fc.integer({ min: Number(minimum ?? -1_000_000), max: Number(maximum ?? 1_000_000) })
      case 'number': return fc.double({ min: Number(minimum ?? -1e9), max: Number(maximum ?? 1e9), noNaN: true, noDefaultInfinity: true })
      case 'boolean': return fc.boolean()
      case 'array': return fc.array(this.valid(schema.items as Schema), { minLength: Number(schema.minItems ?? 0), maxLength: Math.min(Number(schema.maxItems ?? 3), 3) })
      case 'object': return this.#validObject(schema)
      case 'string': {
        const length = { minLength: Number(minLength ?? 0), maxLength: Number(maxLength ?? 40) }
        if (format === 'uuid') return fc.uuid()
        if (format === 'date-time') return fc.date({ noInvalidDate: true, min: new Date(0), max: new Date(4e12) }).map((date) => date.toISOString())
        if (typeof pattern === 'string') {
          return fc.stringMatching(new RegExp(pattern)).filter((text) => text.length >= length.minLength && text.length <= length.maxLength)
        }
        return fc.string({ ...length, unit: 'grapheme' })
      }
      default: return fc.jsonValue({ maxDepth: 1 })
    }
  }

  #validObject (schema: Schema): fc.Arbitrary<unknown> {
    const properties = (schema.properties ?? {}) as Record<string, Schema>
    const required = (schema.required ?? []) as string[]
    return fc.record(Object.fromEntries(Object.entries(properties).map(([name, property]) => [name, this.valid(property)])), { requiredKeys: required })
  }

  /**
   * A value of the schema made wrong in one place: a field replaced by a hostile value, a required
   * one dropped, one added that the schema does not know, or the whole replaced. The caller keeps
   * only those the document refuses.
   */
  invalid (raw: Schema): fc.Arbitrary<unknown> {
    const schema = this.resolve(raw)
    const whole = fc.constantFrom<unknown>(...HOSTILE_JSON)
    if (schema.type !== 'object') return whole
    const properties = Object.keys((schema.properties ?? {}) as Record<string, Schema>)
    const required = (schema.required ?? []) as string[]
    return fc.oneof(
      whole,
      fc.tuple(this.valid(schema), fc.constantFrom(...properties), fc.constantFrom<unknown>(...HOSTILE_JSON))
        .map(([value, name, hostile]) => ({ ...value as object, [name]: hostile })),
      ...required.length > 0 ? [fc.tuple(this.valid(schema), fc.constantFrom(...required)).map(([value, name]) => withoutProperty(value as object, name))] : [],
      this.valid(schema).map((value) => ({ ...value as object, unexpected: 1 }))
    )
  }
}

function withoutProperty (value: object, name: string): object {
  return Object.fromEntries(Object.entries(value).filter(([key]) => key !== name))
}

/** JSON values of every kind, each wrong for most fields: the extremes of numbers included. */
const HOSTILE_JSON: unknown[] = [null, true, 0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 2, '', 'x'.repeat(300), 'Infinity', '1e999', [], [1], {}, { $gt: '' }]

/**
 * Texts of a path, query or header parameter that clients send wrong: numbers past every bound,
 * not finite, not integers, not numbers, too long or empty. The caller keeps those the document refuses.
 */
export const HOSTILE_TEXT = ['Infinity', '-Infinity', 'NaN', '1e999', '1e400', '-1e400', '1234567890123456789012345', '-1', '0', '1.5', 'abc', '', ' ', 'x'.repeat(300), '%', '../..', '1;DROP TABLE orders', 'null', 'true', '[]']

import AjvCompiler from '@fastify/ajv-compiler'
import SerializerSelector from '@fastify/fast-json-stringify-compiler'
import type { FastifySchemaCompiler } from 'fastify'

type RouteSchema = Parameters<FastifySchemaCompiler<unknown>>[0]

/**
 * Header names arrive in lower case. Fastify lower-cases a header schema's names itself, but not
 * for a validator of one's own, which this is.
 */
function lowerCaseHeaderNames (schema: unknown): unknown {
  if (typeof schema !== 'object' || schema === null) return schema
  const { properties, required } = schema as { properties?: Record<string, unknown>, required?: unknown }
  const lowered = properties === undefined
    ? undefined
    : Object.fromEntries(Object.entries(properties).map(([name, value]) => [name.toLowerCase(), value]))
  return {
    ...schema,
    ...(lowered === undefined ? {} : { properties: lowered }),
    ...(Array.isArray(required) ? { required: required.map((name) => String(name).toLowerCase()) } : {})
  }
}

/**
 * Compiled functions kept for the life of the process, keyed by the text of what they were compiled
 * from: the schema, the shared schemas it may reference, and the compiler's options. Compiling is
 * what building an app costs most (Ajv and fast-json-stringify were 60 % of a build's CPU), and a
 * process that builds the app more than once (the tests, the benchmark's A/B builds) compiles each
 * schema once. Within one app nothing changes: Fastify compiles each route part once anyway.
 */
const compiled = new Map<string, unknown>()

/**
 * Wraps a compiler factory: the compiler itself (an Ajv instance, say) is made only on the first
 * schema not compiled before, and a compiled function is reused whenever the same text comes again.
 * Functions in the options (Ajv plugins) do not appear in the text; they are the same in one process.
 */
function reusingCompiled<Definition, Compiled> (
  kind: string,
  context: unknown,
  definitionText: (definition: Definition) => string,
  make: () => (definition: Definition) => Compiled
): (definition: Definition) => Compiled {
  const contextText = `${kind}:${JSON.stringify(context)}:`
  let compile: ((definition: Definition) => Compiled) | undefined
  return (definition) => {
    const key = contextText + definitionText(definition)
    const known = compiled.get(key) as Compiled | undefined
    if (known !== undefined) return known
    compile ??= make()
    const made = compile(definition)
    compiled.set(key, made)
    return made
  }
}

interface PartValidator {
  (data: unknown): unknown
  errors?: unknown
}

/**
 * The name of the first property (or array item of one) of a converted part that holds a number
 * no schema bound can judge: not finite, or past the integers a double holds exactly. Ajv converts
 * `"Infinity"` and `"1e999"` to Infinity and then skips `minimum` and `maximum` for a number that
 * is not finite, so without this check `?page=Infinity` reached the handler.
 */
function unboundedNumberIn (data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null) return undefined
  for (const [name, value] of Object.entries(data)) {
    for (const item of Array.isArray(value) ? value as unknown[] : [value]) {
      if (typeof item === 'number' && !(Math.abs(item) <= Number.MAX_SAFE_INTEGER)) return name
    }
  }
  return undefined
}

/** A converting validator that also refuses, as Ajv refuses a wrong type, a number past every bound. */
function withBoundedNumbers<Validate extends PartValidator> (validate: Validate): Validate {
  const bounded: PartValidator = (data) => {
    const valid = validate(data)
    bounded.errors = validate.errors
    if (valid !== true) return valid
    const name = unboundedNumberIn(data)
    if (name === undefined) return true
    bounded.errors = [{ instancePath: `/${name}`, schemaPath: '#/properties', keyword: 'type', params: {}, message: 'must be a finite number within bounds' }]
    return false
  }
  // Fastify only calls a validator and reads its errors; the rest of Ajv's function type is not used.
  return bounded as Validate
}

/**
 * Fastify's own Ajv validators, except that a body is validated as the client typed it. Fastify
 * coerces every part (`coerceTypes: 'array'`): right for the strings of a path, a query and
 * headers, wrong for a JSON body, where it would take `true` as 1 or 5 as "5" instead of refusing it.
 */
export function exactBodyValidator (): AjvCompiler.BuildCompilerFromPool {
  const buildAjvValidator = AjvCompiler()
  return (externalSchemas, options) => {
    const validator = (): ReturnType<AjvCompiler.BuildCompilerFromPool> => {
      const coercing = buildAjvValidator(externalSchemas, options)
      // A JSON Type Definition validator has no coercion to turn off.
      const strict = { ...options?.customOptions, coerceTypes: false }
      const exact = options?.mode === 'JTD'
        ? coercing
        : buildAjvValidator(externalSchemas, { ...options, customOptions: strict })
      // Fastify calls a compiler with the route's schema definition; the library's type names only the schema.
      return (definition) => {
        const route = definition as RouteSchema
        if (route.httpPart === 'body') return exact(definition)
        // A JSON body holds no Infinity (JSON.parse makes one of 1e999, which Ajv's type check refuses unconverted).
        return withBoundedNumbers(
          coercing(
            (route.httpPart === 'headers'
              ? { ...route, schema: lowerCaseHeaderNames(route.schema) }
              : route) as typeof definition
          )
        )
      }
    }
    return reusingCompiled('validator', [externalSchemas, options], (definition) => {
      const { httpPart, schema } = definition as RouteSchema
      return JSON.stringify([httpPart, schema])
    }, validator)
  }
}

/** Fastify's own serializers (fast-json-stringify), each compiled once per process as above. */
export function reusingSerializer (): SerializerSelector.SerializerFactory {
  const buildSerializer = SerializerSelector()
  return (externalSchemas, options) => reusingCompiled('serializer', [externalSchemas, options],
    (definition) => JSON.stringify(definition.schema), () => buildSerializer(externalSchemas, options))
}

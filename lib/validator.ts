import AjvCompiler from '@fastify/ajv-compiler'
import type { FastifySchemaCompiler } from 'fastify'

type RouteSchema = Parameters<FastifySchemaCompiler<unknown>>[0]

/**
 * Header names arrive in lower case. Fastify lower-cases a header schema's names itself, but not
 * for a validator of one's own, which this is.
 */
function lowerCaseHeaderNames (schema: unknown): unknown {
  if (typeof schema !== 'object' || schema === null) return schema
  const { properties, required } = schema as { properties?: Record<string, unknown>, required?: unknown }
  return {
    ...schema,
    ...(properties === undefined ? {} : { properties: Object.fromEntries(Object.entries(properties).map(([name, value]) => [name.toLowerCase(), value])) }),
    ...(Array.isArray(required) ? { required: required.map((name) => String(name).toLowerCase()) } : {})
  }
}

/**
 * Fastify's own Ajv validators, except that a body is validated as the client typed it. Fastify
 * coerces every part (`coerceTypes: 'array'`): right for the strings of a path, a query and
 * headers, wrong for a JSON body, where it would take `true` as 1 or 5 as "5" instead of refusing it.
 * One per app, as Fastify's own is: its Ajv instances keep every schema they compile.
 */
export function exactBodyValidator (): AjvCompiler.BuildCompilerFromPool {
  const buildAjvValidator = AjvCompiler()
  return (externalSchemas, options) => {
    const coercing = buildAjvValidator(externalSchemas, options)
    // A JSON Type Definition validator has no coercion to turn off.
    const exact = options?.mode === 'JTD' ? coercing : buildAjvValidator(externalSchemas, { ...options, customOptions: { ...options?.customOptions, coerceTypes: false } })
    // Fastify calls a compiler with the route's schema definition; the library's type names only the schema.
    return (definition) => {
      const route = definition as RouteSchema
      if (route.httpPart === 'body') return exact(definition)
      return coercing((route.httpPart === 'headers' ? { ...route, schema: lowerCaseHeaderNames(route.schema) } : route) as typeof definition)
    }
  }
}

import AjvCompiler from '@fastify/ajv-compiler'
import type { FastifySchemaCompiler } from 'fastify'

const buildAjvValidator = AjvCompiler()

/**
 * Fastify's own Ajv validators, except that a body is validated as the client typed it. Fastify
 * coerces every part (`coerceTypes: 'array'`): right for the strings of a path, a query and
 * headers, wrong for a JSON body, where it would take `true` as 1 or 5 as "5" instead of refusing it.
 */
export const buildValidator: AjvCompiler.BuildCompilerFromPool = (externalSchemas, options) => {
  const coercing = buildAjvValidator(externalSchemas, options)
  // A JSON Type Definition validator has no coercion to turn off.
  const exact = options?.mode === 'JTD' ? coercing : buildAjvValidator(externalSchemas, { ...options, customOptions: { ...options?.customOptions, coerceTypes: false } })
  // Fastify calls a compiler with the route's schema definition; the library's type names only the schema.
  return (route) => {
    const { httpPart } = route as Parameters<FastifySchemaCompiler<unknown>>[0]
    return (httpPart === 'body' ? exact : coercing)(route)
  }
}

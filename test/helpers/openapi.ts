import AjvCompiler from '@fastify/ajv-compiler'
import type { FastifyInstance } from 'fastify'

export type Schema = Record<string, unknown>
export interface Parameter { in: 'path' | 'query' | 'header' | 'cookie', name: string, required?: boolean, schema: Schema }
export interface Operation {
  operationId?: string
  parameters?: Parameter[]
  requestBody?: { required?: boolean, content: Record<string, { schema: Schema }> }
  responses: Record<string, { content?: Record<string, { schema: Schema }> }>
  security?: Array<Record<string, unknown>>
}
export interface OpenApiDocument {
  paths: Record<string, Record<string, Operation>>
  components: { schemas: Record<string, Schema>, securitySchemes: Record<string, Schema> }
}
export type Validate = ((data: unknown) => boolean) & { errors?: unknown }

/** The app's own OpenAPI document, as GET /docs/json serves it. */
export function documentOf (app: FastifyInstance): OpenApiDocument {
  return app.swagger() as unknown as OpenApiDocument
}

const COMPONENT = '#/components/schemas/'

/** A copy of `schema` whose references to the document's components name them by their own `$id`. */
function withComponentIds (schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withComponentIds)
  if (typeof schema !== 'object' || schema === null) return schema
  return Object.fromEntries(Object.entries(schema).map(([key, value]) =>
    [key, key === '$ref' && typeof value === 'string' && value.startsWith(COMPONENT) ? value.slice(COMPONENT.length) : withComponentIds(value)]))
}

/**
 * Validators of the document's schemas, by Fastify's own Ajv (formats included) without its type
 * conversion: what a client reading the document would check. OpenAPI's own words (`example`) are
 * not JSON Schema, hence not strict; `nullable` is one Ajv knows.
 */
export function documentValidators (document: OpenApiDocument): (schema: Schema) => Validate {
  const components = Object.fromEntries(Object.entries(document.components.schemas).map(([name, schema]) => [name, { ...withComponentIds(schema) as Schema, $id: name }]))
  const compile = AjvCompiler()(components, { customOptions: { strict: false, coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false } })
  return (schema) => compile({ schema: withComponentIds(schema) as Schema, method: 'GET', url: '/', httpPart: 'body' }) as unknown as Validate
}

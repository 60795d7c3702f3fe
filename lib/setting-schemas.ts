import { FormatRegistry, Type } from '@sinclair/typebox'

FormatRegistry.Set('url', (value) => URL.canParse(value))

/** A setting whose value is a URL. */
export const Url = (description: string) => Type.String({ format: 'url', description })

/** A credential: any text but the empty one. */
export const Secret = (description: string) => Type.String({ minLength: 1, description })

import { FormatRegistry, Type } from '@sinclair/typebox'

FormatRegistry.Set('url', (value) => URL.canParse(value))

// scheme://host[:port], a trailing slash allowed: the form of an origin, never a path, query or fragment.
const ORIGIN_FORM = /^https?:\/\/[^/?#@\s,]+\/?$/i

/**
 * The origins of a comma-separated list, each as a browser's `Origin` header spells it (lower
 * case, no default port, no trailing slash), once each; undefined when an entry is no http(s)
 * origin or the list names none.
 */
export function originsOf (list: string): string[] | undefined {
  const entries = list.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  if (entries.length === 0 || !entries.every((entry) => ORIGIN_FORM.test(entry) && URL.canParse(entry))) {
    return undefined
  }
  return [...new Set(entries.map((entry) => new URL(entry).origin))]
}

FormatRegistry.Set('origins', (value) => originsOf(value) !== undefined)

/** A setting whose value is a URL. */
export const Url = (description: string) => Type.String({ format: 'url', description })

/** A setting whose value is a comma-separated list of web origins (`https://portal.example.com`). */
export const Origins = (description: string) => Type.String({ format: 'origins', description })

/** A duration in milliseconds, from 1 ms to 10 minutes. */
export const Milliseconds = (defaultValue: number, description: string) =>
  Type.Integer({ minimum: 1, maximum: 600_000, default: defaultValue, description })

/** A credential: any text but the empty one. */
export const Secret = (description: string) => Type.String({ minLength: 1, description })

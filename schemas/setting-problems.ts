// How a refused setting is said: one line per setting, naming it and the values it takes.
import { Value } from '@sinclair/typebox/value'
import type { TObject, TSchema } from '@sinclair/typebox'

export interface SettingProblem {
  setting: string
  problem: string
}

/** Every problem of the settings, one line each, so that one start reports them all. */
export class ConfigError extends Error {
  readonly problems: SettingProblem[]

  constructor (setting: string, problem: string, more: SettingProblem[] = []) {
    const problems = [{ setting, problem }, ...more]
    super(problems.map((each) => `Invalid setting ${each.setting}: ${each.problem}`).join('\n'))
    this.name = 'ConfigError'
    this.problems = problems
  }

  /** The first setting named. */
  get setting (): string {
    return this.problems[0]!.setting
  }

  static of (problems: SettingProblem[]): ConfigError {
    const [first, ...more] = problems
    return new ConfigError(first!.setting, first!.problem, more)
  }
}

/**
 * A value fit for an error message, a long one cut. A URL is often refused for a character its
 * password should have escaped, so everything from `//` to the last `@` is hidden, and so are
 * query parameters that may carry a password.
 */
function describeValue (value: unknown): string {
  const text = String(value)
    .replace(/\/\/.*@/, '//***@')
    .replace(/([?&](?:password|passwd|pass|pwd|secret|token|key)=)[^&]*/gi, '$1***')
  return text.length > 40 ? `'${text.slice(0, 40)}…'` : `'${text}'`
}

/**
 * The values a setting takes, said as its schema allows them: `one of info, debug`, `a whole number from 1 to 600000`.
 */
export function formOf (schema: TSchema): string | undefined {
  if (Array.isArray(schema.anyOf)) return `one of ${(schema.anyOf as TSchema[]).map((option) => String(option.const)).join(', ')}`
  const { minimum, maximum } = schema as { minimum?: number, maximum?: number }
  switch (schema.type) {
    case 'boolean': return 'true or false'
    case 'integer':
      if (minimum !== undefined && maximum !== undefined) return `a whole number from ${minimum} to ${maximum}`
      return minimum === undefined ? 'a whole number' : `a whole number of at least ${minimum}`
    case 'string':
      if (schema.format === 'url') return 'a URL'
      if (schema.format === 'origins') return 'comma-separated origins, scheme://host[:port] without a path'
      if (typeof schema.pattern === 'string') return `text matching ${schema.pattern}`
      if (typeof schema.minLength === 'number' && schema.minLength > 1) return `at least ${schema.minLength} characters`
      return undefined
    default: return undefined
  }
}

/** One problem per setting the schema refuses, each with the values it allows. */
export function schemaProblems (schema: TObject, settings: Record<string, unknown>): SettingProblem[] {
  const problems = new Map<string, string>()
  for (const error of Value.Errors(schema, settings)) {
    const setting = error.path.split('/')[1] ?? 'configuration'
    if (problems.has(setting)) continue
    const secret = /SECRET|KEY|PASSWORD/.test(setting)
    const got = secret || error.value === undefined ? '' : ` (got ${describeValue(error.value)})`
    const property = schema.properties[setting]
    const form = property === undefined ? undefined : formOf(property)
    problems.set(setting, error.value === undefined
      ? `required: ${form ?? 'a value'}, ${String(property?.description)}`
      : form === undefined ? `${error.message.toLowerCase()}${got}` : `must be ${form}${got}`)
  }
  return [...problems].map(([setting, problem]) => ({ setting, problem }))
}

/** What a setting production requires is, for the message that names it missing. */
export function requiredInProduction (schema: TObject, name: string): string {
  const property = schema.properties[name]!
  const form = formOf(property)
  return `required in production (${form === undefined ? '' : `${form}: `}${String(property.description)})`
}

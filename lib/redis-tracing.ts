import type { Redis } from 'ioredis'
import { SpanKind, failSpan, recording, startChildSpan } from './tracing.js'

type Command = (...args: unknown[]) => unknown

/** The traced prototype made for each client prototype, once. */
const tracedPrototypes = new WeakMap<object, object>()

function tracedPrototype (base: object, names: string[]): object {
  const traced = Object.create(base) as Record<string, unknown>
  for (const name of names) {
    const command = (base as Record<string, unknown>)[name]
    if (typeof command !== 'function') continue
    const operation = name.toUpperCase()
    traced[name] = function tracedCommand (this: unknown, ...args: unknown[]): unknown {
      if (!recording()) return (command as Command).apply(this, args)
      const span = startChildSpan(`redis ${operation}`, {
        kind: SpanKind.CLIENT,
        attributes: { 'db.system.name': 'redis', 'db.operation.name': operation, 'db.query.text': `${operation}${' ?'.repeat(args.length)}` }
      })
      const result = (command as Command).apply(this, args)
      if (span === undefined) return result
      if (result instanceof Promise) {
        result.then(() => span.end(), (error: unknown) => {
          failSpan(span, error)
          span.end()
        })
      } else {
        span.end()
      }
      return result
    }
  }
  return traced
}

/**
 * A span for each command a traced piece of work sends through `client`, keys and values elided.
 * The client's command methods are wrapped, through a prototype put between the client and
 * ioredis's own (methods set on the client itself would turn it into a slow dictionary object), and
 * ioredis's prototype is left alone. A command is timed from where it is called, in its caller's
 * trace, which auto-pipelining would lose by the time the command is written.
 */
export function traceCommands (client: Redis): void {
  const base = Object.getPrototypeOf(client) as object
  let traced = tracedPrototypes.get(base)
  if (traced === undefined) {
    traced = tracedPrototype(base, client.getBuiltinCommands())
    tracedPrototypes.set(base, traced)
  }
  Object.setPrototypeOf(client, traced)
}

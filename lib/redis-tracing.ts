import type { Redis } from 'ioredis'
import { SpanKind, failSpan, startChildSpan } from './tracing.js'

type Command = (...args: unknown[]) => unknown

/**
 * A span for each command a traced piece of work sends through `client`, keys and values elided.
 * The command methods of this client are wrapped, not ioredis's prototype: a command is timed from
 * where it is called, in its caller's trace, which auto-pipelining would lose by the time it is written.
 */
export function traceCommands (client: Redis): void {
  const methods = client as unknown as Record<string, unknown>
  for (const name of client.getBuiltinCommands()) {
    const command = methods[name]
    if (typeof command !== 'function') continue
    const operation = name.toUpperCase()
    methods[name] = function traced (this: unknown, ...args: unknown[]): unknown {
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
}

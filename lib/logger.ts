import { once } from 'node:events'
import { closeSync, mkdirSync, openSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  destination, multistream, pino, symbols, type Bindings, type ChildLoggerOptions, type Logger, type StreamEntry
} from 'pino'
import type { FastifyBaseLogger } from 'fastify'
import { currentContext } from './request-context.js'

export interface LoggerSettings {
  level: string
  service: string
  logDir: string
  /** Tests turn this off: tap reads a test's stdout. */
  stdout?: boolean
  /**
   * Fields a line adds beside the specification's (the current span's ids while tracing): a new
   * object each call, or undefined for none.
   */
  lineFields?: () => object | undefined
}

export interface ServiceLogger {
  /** Root logger, without a correlation id; request loggers are its children. */
  root: Logger
  /** Logger for lines that belong to no request. */
  system: Logger
  /** Resolves once both log files are open; rejects when one cannot be opened. */
  ready: Promise<void>
  /** Writes every line logged so far to its files. */
  flush(): Promise<void>
  /** Opens the log files again by name: after logrotate has renamed them, new files are made. */
  reopen(): void
}

// Paths are relative to the logged object; wildcards cover one level of nesting.
const REDACTED_PATHS = [
  'req.headers.authorization', 'req.headers.cookie', 'headers.authorization', 'headers.cookie',
  'headers["set-cookie"]', 'password', 'password2', 'token', 'accessToken', 'access_token', 'secret', 'assertion',
  '*.password', '*.password2', '*.token', '*.accessToken', '*.access_token', '*.secret', '*.assertion',
  '*.authorization',
  // The OpenID Connect client's secret and the provider's tokens, should an error carry them.
  'client_secret', 'clientSecret', 'id_token', 'idToken', 'refresh_token', 'logout_token', 'code_verifier',
  '*.client_secret', '*.clientSecret', '*.id_token', '*.idToken', '*.refresh_token', '*.logout_token', '*.code_verifier'
]

// How long a flush waits for a file write under way (sonic-boom's own `_writing`; without it, none).
const FLUSH_WAIT_MS = 1000

const NO_FIELDS = Object.freeze({})

type Stringifier = (value: unknown, ...rest: unknown[]) => string | undefined

/**
 * pino redacts by stringifying every field of a line through a redactor; a path under `*` gives
 * every field one, and @pinojs/redact parses each of its paths again on every call: a number or a
 * string, which holds no path, cost the request's line about 20 µs. Such a value is written as
 * that redactor writes it (JSON); objects still go through it. Without the redactor pino might make
 * (another version), nothing is changed.
 */
export function stringifyPrimitivesDirectly (logger: Logger): void {
  const stringifiers = (logger as unknown as Record<symbol, Record<symbol, Stringifier | undefined> | undefined>)[
    symbols.stringifiersSym
  ]
  const anyField = stringifiers?.[symbols.wildcardFirstSym]
  if (stringifiers === undefined || typeof anyField !== 'function') return
  stringifiers[symbols.wildcardFirstSym] = (value, ...rest) =>
    typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
      ? JSON.stringify(value)
      : anyField(value, ...rest)
}

/**
 * pino's mixin result is merged into by each line (Object.assign onto it): the frozen `NO_FIELDS`
 * is never merged into, the line's own fields are written as they are.
 */
function withLineFields (lineFields: () => object | undefined) {
  return {
    mixin: () => lineFields() ?? NO_FIELDS,
    mixinMergeStrategy: (line: object, fields: object) => fields === NO_FIELDS ? line : Object.assign(fields, line)
  }
}

export function createLogger ({ level, service, logDir, stdout = true, lineFields }: LoggerSettings): ServiceLogger {
  mkdirSync(logDir, { recursive: true })
  const [combinedPath, errorsPath] = [join(logDir, 'combined.log'), join(logDir, 'error.log')]
  // pino's destination opens its file asynchronously, and one that never opened throws from
  // pino's exit handler: a file that cannot be opened must fail the start here, in one line.
  for (const path of [combinedPath, errorsPath]) closeSync(openSync(path, 'a'))
  // Opened by name, not by descriptor, so that they can be reopened; in append mode, so that a
  // copy-and-truncate rotation leaves no hole either.
  const combined = destination({ dest: combinedPath, append: true, sync: false })
  const errors = destination({ dest: errorsPath, append: true, sync: false })
  // A file that cannot be opened at start fails the start. Once open, a file that can no longer be
  // written or reopened (disk full, directory gone) must not end the service: stdout still gets
  // every line, and stderr says why the file stopped.
  const ready = Promise.all([once(combined, 'ready'), once(errors, 'ready')]).then(() => {
    for (const [name, file] of [['combined.log', combined], ['error.log', errors]] as const) {
      file.on('error', (error: NodeJS.ErrnoException) => process.stderr.write(`log file ${name} unavailable: ${error.code ?? error.message}\n`))
    }
  })
  const streams: StreamEntry[] = [
    { level: 'trace', stream: combined },
    { level: 'error', stream: errors }
  ]
  const console = stdout ? destination({ dest: 1, sync: false }) : undefined
  if (console !== undefined) streams.push({ level: 'trace', stream: console })

  const root = pino({
    level,
    messageKey: 'message',
    base: { service },
    timestamp: () => `,"timestamp":"${new Date().toISOString()}"`,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    ...(lineFields !== undefined && withLineFields(lineFields))
  }, multistream(streams))
  stringifyPrimitivesDirectly(root)

  return {
    root,
    system: root.child({ correlationId: 'system' }),
    ready,
    async flush () {
      for (const destination of [combined, errors, console]) {
        if (destination === undefined) continue
        // flushSync writes what is buffered at once, but a write already under way lands when the
        // thread pool ends it: after it, or a reader just after the close misses lines, out of order.
        const deadline = Date.now() + FLUSH_WAIT_MS
        while ((destination as unknown as { _writing: boolean })._writing && Date.now() < deadline) await sleep(1)
        destination.flushSync()
      }
    },
    reopen () {
      combined.reopen()
      errors.reopen()
    }
  }
}

type LogMethod = (...args: unknown[]) => void
type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

/** pino's log methods, each passed on to the logger `target` names at the time of the call. */
abstract class DelegatingLogger {
  protected abstract get target (): Pick<
    FastifyBaseLogger,
    'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'
  >

  fatal (...args: unknown[]): void { this.write('fatal', args) }
  error (...args: unknown[]): void { this.write('error', args) }
  warn (...args: unknown[]): void { this.write('warn', args) }
  info (...args: unknown[]): void { this.write('info', args) }
  debug (...args: unknown[]): void { this.write('debug', args) }
  trace (...args: unknown[]): void { this.write('trace', args) }
  silent (...args: unknown[]): void { this.write('silent', args) }

  protected write (level: LogLevel, args: unknown[]): void {
    (this.target[level] as LogMethod)(...args)
  }
}

/**
 * The service's own logger (`fastify.log`): a line written while a request or a job is being served
 * goes through that work's logger, so that it carries the work's correlation id (an upstream's
 * failure, a retry, a cache or database error inside a request); any other line is the system's.
 */
export class ContextLogger extends DelegatingLogger {
  constructor (private readonly system: FastifyBaseLogger) {
    super()
  }

  protected get target (): FastifyBaseLogger {
    return currentContext()?.log ?? this.system
  }

  get level (): string {
    return this.system.level
  }

  set level (level: string) {
    this.system.level = level
  }

  /**
   * A child of the system logger that still writes through the current work's logger (Fastify makes one of its logger).
   */
  child (bindings: Bindings, options?: ChildLoggerOptions): ContextLogger {
    return new ContextLogger(this.system.child(bindings, options))
  }
}

/**
 * A request's logger, made into a pino child only when the request first logs. A child per
 * request (with redaction over its bindings) costs a third of a probe's throughput, and most
 * probe requests never log. Its methods live on the prototype: one is made per request.
 */
export class LazyChildLogger extends DelegatingLogger {
  #child: Logger | undefined

  /** The child's options hold a level at most: no serializers or other settings a line would go through. */
  readonly #levelOnly: boolean

  constructor (
    private readonly parent: Logger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions
  ) {
    super()
    this.#levelOnly = Object.keys(options).every((key) => key === 'level')
  }

  protected get target (): Logger {
    this.#child ??= this.parent.child(this.bindings, this.options)
    return this.#child
  }

  get level (): string {
    return this.#child?.level ?? this.options.level ?? this.parent.level
  }

  set level (level: string) {
    this.target.level = level
  }

  child (bindings: Bindings, options?: ChildLoggerOptions): Logger {
    return this.target.child(bindings, options)
  }

  /**
   * A line of an object and a message, while no child exists and the child would change nothing
   * but the bindings, is written by the parent with the bindings put first: the same line, without
   * making a child for it (every request's completion line is such a line).
   */
  protected override write (level: LogLevel, args: unknown[]): void {
    const [fields, ...rest] = args
    if (
      this.#child === undefined &&
      this.#bindingsOnly() &&
      typeof fields === 'object' &&
      fields !== null &&
      !(fields instanceof Error)
    ) {
      (this.parent[level] as LogMethod)({ ...this.bindings, ...fields }, ...rest)
      return
    }
    super.write(level, args)
  }

  #bindingsOnly (): boolean {
    const { level } = this.options
    return this.#levelOnly && (level === undefined || level === this.parent.level)
  }
}

/**
 * The classes every upstream or dependency failure is sorted into, once, where it happens.
 * Everything above the integration clients uses the class, never the raw error text.
 */
export const FAILURE_CLASSES = ['timeout', 'connection_refused', 'auth_failed', 'http_5xx', 'quota_exceeded', 'upstream_error'] as const
export type FailureClass = typeof FAILURE_CLASSES[number]

export class UpstreamFailure extends Error {
  constructor (readonly failure: FailureClass, readonly upstream: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = 'UpstreamFailure'
  }
}

/**
 * The upstream answered and refused this request for a reason of the request's own (AddOrder of a
 * product that does not exist): an answer, not a failure of the upstream. It still rejects the
 * call, but neither the upstream's error rate nor its request queue counts it as failed.
 */
export class UpstreamRefusal extends UpstreamFailure {
  constructor (upstream: string, message: string) {
    super('upstream_error', upstream, message)
    this.name = 'UpstreamRefusal'
  }
}

const NETWORK_CODES: Record<string, FailureClass> = {
  ECONNREFUSED: 'connection_refused',
  ECONNRESET: 'connection_refused',
  EHOSTUNREACH: 'connection_refused',
  ENOTFOUND: 'connection_refused',
  EPIPE: 'connection_refused',
  ETIMEDOUT: 'timeout',
  UND_ERR_CONNECT_TIMEOUT: 'timeout',
  UND_ERR_HEADERS_TIMEOUT: 'timeout',
  UND_ERR_BODY_TIMEOUT: 'timeout',
  UND_ERR_SOCKET: 'connection_refused',
  ABORT_ERR: 'timeout'
}

function codeOf (error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined
  const { code, cause } = error as { code?: unknown, cause?: unknown }
  if (typeof code === 'string' && code in NETWORK_CODES) return code
  return codeOf(cause) ?? (typeof code === 'string' ? code : undefined)
}

export function classifyFailure (error: unknown): FailureClass {
  if (error instanceof UpstreamFailure) return error.failure
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return 'timeout'
  if (error instanceof Error && /timeout|timed out/i.test(error.message)) return 'timeout'
  const code = codeOf(error)
  return (code !== undefined ? NETWORK_CODES[code] : undefined) ?? 'upstream_error'
}

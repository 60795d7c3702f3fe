// SQLSTATE classes and driver errors that mean "the database cannot be reached", as opposed
// to a query that is wrong: 08 connection exception, 53300 too_many_connections (the server
// refuses new connections), 57P01-57P03 shutdown or not yet accepting connections.
const UNAVAILABLE_SQLSTATE = /^(08...|53300|57P0[1-3])$/
const UNAVAILABLE_NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EPIPE'])
const UNAVAILABLE_MESSAGES = /timeout exceeded when trying to connect|Connection terminated|Query read timeout|Client has encountered a connection error/

export function isDatabaseUnavailable (error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false
  const { code, message } = error as { code?: unknown, message?: unknown }
  if (typeof code === 'string' && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_NETWORK_CODES.has(code))) return true
  return typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message)
}

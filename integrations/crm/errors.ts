import { UpstreamFailure, type FailureClass } from '../../lib/errors.js'
import { asRecord, errorBody } from '../upstream.js'

/** A REST error answer: Salesforce's `errorCode` (NOT_FOUND, INVALID_FIELD...) and the HTTP status. */
export class CrmApiError extends UpstreamFailure {
  constructor (failure: FailureClass, readonly status: number, readonly errorCode: string, message: string) {
    super(failure, 'crm', message)
    this.name = 'CrmApiError'
  }
}

/** No such record: any 404 (NOT_FOUND, ENTITY_IS_DELETED), or an id that cannot be one (MALFORMED_ID). */
export function isNotFound (status: number, errorCode: string): boolean {
  return status === 404 || errorCode === 'MALFORMED_ID'
}

export function isCrmNotFound (error: unknown): error is CrmApiError {
  return error instanceof CrmApiError && isNotFound(error.status, error.errorCode)
}

/** The first `{errorCode, message}` of a REST error answer. */
export function restError (text: string): { errorCode: string, message: string } {
  const body = errorBody(text)
  const { errorCode, message } = asRecord(Array.isArray(body) ? body[0] : body)
  return {
    errorCode: typeof errorCode === 'string' ? errorCode : 'UNKNOWN',
    message: typeof message === 'string' ? message : ''
  }
}

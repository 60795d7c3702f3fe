/**
 * Settles with `promise`, or rejects with the signal's reason once `signal` aborts, whichever
 * comes first: a bound for work that may not heed the signal itself, or that others share.
 */
export function abortable<T> (promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise((resolve, reject) => {
    const abort = (): void => reject(signal.reason)
    signal.addEventListener('abort', abort, { once: true })
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort))
  })
}

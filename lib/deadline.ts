/**
 * An abort signal that fires when `ms` have passed or when `parent` aborts, whichever comes first;
 * `onPassed` is told when the time is up. `clear()` releases its timer and its listener on the
 * parent once the work is done.
 *
 * Written by hand because it sits on every upstream call: AbortSignal.timeout's timer cannot be
 * cleared (it outlives the call by the whole deadline), and AbortSignal.any costs tens of
 * microseconds a call on Node 20 — more than the rest of the request queue together.
 */
export class Deadline {
  readonly #controller = new AbortController()
  readonly #timer: NodeJS.Timeout
  readonly #parent: AbortSignal | undefined
  #passed = false

  constructor (ms: number, parent?: AbortSignal, onPassed?: () => void) {
    this.#parent = parent
    this.#timer = setTimeout(() => {
      this.#passed = true
      onPassed?.()
      this.#controller.abort(new DOMException(`deadline of ${ms} ms passed`, 'TimeoutError'))
    }, ms)
    if (parent === undefined) return
    if (parent.aborted) this.#abortWithParent()
    else parent.addEventListener('abort', this.#abortWithParent, { once: true })
  }

  get signal (): AbortSignal {
    return this.#controller.signal
  }

  /** True when the deadline itself fired (not the parent). */
  get passed (): boolean {
    return this.#passed
  }

  clear (): void {
    clearTimeout(this.#timer)
    this.#parent?.removeEventListener('abort', this.#abortWithParent)
  }

  readonly #abortWithParent = (): void => {
    clearTimeout(this.#timer)
    this.#controller.abort(this.#parent?.reason)
  }
}

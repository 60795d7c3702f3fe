/**
 * What `work` resolves to, if it settles before `ms` have passed; undefined if it has not.
 *
 * A test that must show a request did not wait on a dependency gives that dependency a timeout far
 * above what the request is meant to wait for, and asks for the answer before it: an answer that
 * waited would come only once the timeout fired. The bound is the dependency's own timeout, not a
 * figure of how fast the machine is, so a loaded machine does not decide the test.
 */
export async function before<T> (ms: number, work: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined
  const elapsed = new Promise<undefined>((resolve) => { timer = setTimeout(resolve, ms, undefined) })
  try {
    return await Promise.race([work, elapsed])
  } finally {
    clearTimeout(timer)
  }
}

import t from 'tap'

/*
 * What holds a test file's process open once its tests have all ended: printed to stderr, so that a
 * file the test runner times out for not exiting names its cause in the CI log.
 */

interface Handle { constructor?: { name?: string }, remoteAddress?: string, remotePort?: number, localPort?: number, pid?: number, spawnfile?: string, listening?: boolean, address?: () => unknown }

function describe (handle: Handle): string {
  const type = handle.constructor?.name ?? typeof handle
  if (handle.remotePort !== undefined) return `${type} ${handle.localPort ?? '?'} -> ${handle.remoteAddress ?? '?'}:${handle.remotePort}`
  if (handle.pid !== undefined) return `${type} pid ${handle.pid} ${handle.spawnfile ?? ''}`
  if (handle.listening === true && typeof handle.address === 'function') return `${type} listening ${JSON.stringify(handle.address())}`
  return type
}

function report (when: string): void {
  const handles = (process as unknown as { _getActiveHandles: () => Handle[] })._getActiveHandles()
    .filter((handle) => handle !== process.stdout && handle !== process.stderr && handle !== process.stdin)
  process.stderr.write(`${when}: ${JSON.stringify({ resources: process.getActiveResourcesInfo(), handles: handles.map(describe) })}\n`)
}

let installed = false

/** Installs the report once per process. */
export function reportHangs (): void {
  if (installed) return
  installed = true
  // A process that exits once its tests end never runs this.
  t.teardown(() => { setTimeout(() => report('every test ended 15 s ago, still open'), 15_000).unref() })
}

import type { ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * Polls `probe` until it holds. Past `timeoutMs` it fails with what the last try threw, and with
 * `context()` when given (a child's state and last output): a timeout that says why.
 */
export async function waitFor (what: string, probe: () => Promise<boolean>, timeoutMs = 15_000, context?: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let lastError: unknown
  for (;;) {
    if (await probe().catch((error: unknown) => { lastError = error; return false })) return
    if (Date.now() > deadline) {
      const tried = lastError === undefined ? '' : ` (the last try: ${lastError instanceof Error ? lastError.message : String(lastError)})`
      throw new Error(`Timed out waiting for ${what} after ${timeoutMs} ms${tried}${context === undefined ? '' : `; ${context()}`}`)
    }
    await sleep(50)
  }
}

/** How many of a child's last lines its report keeps, of its stdout and stderr together. */
const KEPT_LINES = 30

/**
 * Reads a child's piped stdout and stderr as they come (so that a full pipe never blocks it) and
 * keeps their last lines: the report of a child that did not start, saying whether it runs.
 */
export function childReport (child: ChildProcess, name: string): () => string {
  const lines: string[] = []
  for (const [stream, label] of [[child.stdout, 'stdout'], [child.stderr, 'stderr']] as const) {
    if (stream === null) continue
    createInterface({ input: stream }).on('line', (line) => {
      lines.push(`${label}: ${line}`)
      if (lines.length > KEPT_LINES) lines.shift()
    })
  }
  return () => {
    const state = child.exitCode !== null ? `exited with ${child.exitCode}` : child.signalCode !== null ? `ended by ${child.signalCode}` : 'running'
    return `${name} (pid ${child.pid ?? 'none'}) is ${state}; its last output:\n${lines.length === 0 ? '(nothing)' : lines.join('\n')}`
  }
}

export { exited } from '../../dev/tools/service-process.js'

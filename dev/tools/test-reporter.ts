import { Transform, type TransformCallback } from 'node:stream'
import { Parser, type Result } from 'tap-parser'
import { stringify } from 'tap-yaml'

/** The run's own closing comment (dev/tools/test-runner.ts): the assertion counts of every file. */
const COUNTS = /^# (\{ total: .*\})$/

/** A failed assertion as tap writes it: its line, under the subtests it is in, and its diagnostics. */
function inFull (failure: Result): string[] {
  const path = failure.fullname.split(' > ').slice(1, -1)
  const lines = [`${path.length > 0 ? `${path.join(' > ')} > ` : ''}not ok ${failure.id} - ${failure.name}`]
  if (failure.diag !== null && Object.keys(failure.diag as object).length > 0) {
    lines.push('  ---', ...stringify(failure.diag).trimEnd().split('\n').map((line) => `  ${line}`), '  ...')
  }
  return lines
}

/**
 * The test runner's reporter (dev/tools/test-runner.ts): plain lines, no cursor codes, wherever the output goes.
 * The runner writes each file's TAP as a subtest of the run's; tap-parser reads it. While the files
 * run, one line per failed file; at the end every skipped test with its reason, then each failure
 * in full, and one summary line last.
 */
export default class TestReporter extends Transform {
  readonly #parser = new Parser()
  /** The failed assertions of the file being read, for its report if it fails. */
  #failed: Result[] = []
  readonly #skips: string[] = []
  readonly #failures: string[][] = []
  #files = 0
  #failedFiles = 0
  #summary = ''

  constructor () {
    super()
    // Every result of any depth surfaces on the root parser, named by its path of subtests.
    this.#parser.on('fail', (result: Result) => { if (result.fullname.includes(' > ')) this.#failed.push(result) })
    this.#parser.on('skip', (result: Result) => this.#skips.push(`${result.fullname}: ${String(result.skip).trim()}`))
    this.#parser.on('comment', (line: string) => {
      const counts = COUNTS.exec(line.trimEnd())
      if (counts !== null) this.#summary = `assertions ${counts[1]!}`
    })
    // A top-level test point: one file, after its subtest.
    this.#parser.on('assert', (file: Result) => {
      const failed = this.#failed
      this.#failed = []
      this.#files++
      if (file.ok || file.skip !== false) return
      this.#failedFiles++
      // The runner's reason, when the file's own TAP may not say why it failed (a signal, an exit code).
      const reason = (file.diag as { reason?: string } | null)?.reason
      this.#failures.push([`✖ ${file.name}`, ...reason === undefined ? [] : [reason], ...failed.flatMap(inFull)])
      this.push(`✖ ${file.name} failed (in full at the end)\n`)
    })
  }

  override _transform (chunk: Buffer | string, _encoding: BufferEncoding, done: TransformCallback): void {
    this.#parser.write(chunk.toString())
    done()
  }

  override _flush (done: TransformCallback): void {
    this.#parser.end()
    const out: string[] = []
    if (this.#skips.length > 0) out.push('', `Skipped (${this.#skips.length}):`, ...this.#skips.map((skip) => `  ${skip}`))
    for (const failure of this.#failures) out.push('', ...failure)
    const passed = this.#files - this.#failedFiles
    out.push('', `${this.#failedFiles === 0 ? 'PASS' : 'FAIL'}: ${passed} of ${this.#files} test files passed, ${this.#failedFiles} failed, ${this.#skips.length} tests skipped${this.#summary === '' ? '' : `; ${this.#summary}`}`, '')
    this.push(out.join('\n'))
    done()
  }
}

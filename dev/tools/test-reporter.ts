import { Transform, type TransformCallback } from 'node:stream'

/** A top-level result of the TAP stream: one test file. */
const FILE_RESULT = /^(not )?ok \d+ - (.+?)(?: # (SKIP|TODO)\b(.*?))?(?: # time=[\d.]+m?s)?$/
const SKIP = /^(\s*)(?:not )?ok \d+ - (.+?) # SKIP\b\s*(.*)$/
const SUBTEST = /^(\s*)# Subtest: (.+)$/

/** The `not ok` lines of a file's TAP, each with its YAML diagnostics (the diff, the source, the stack). */
function failedLines (block: string[]): string[] {
  const lines: string[] = []
  let diagnostics: string | undefined
  for (const line of block) {
    if (diagnostics !== undefined) {
      lines.push(line)
      if (line.trim() === '...' && line.indexOf('...') === diagnostics.length) diagnostics = undefined
    } else if (/^\s*not ok /.test(line)) {
      lines.push(line)
      diagnostics = /^(\s*)/.exec(line)![1]! + '  '
    }
  }
  return lines
}

/**
 * The test runner's reporter (dev/tools/test-runner.ts): plain lines, no cursor codes, wherever the output goes.
 * While the files run, one line per failed file; at the end every skipped test with its reason,
 * then each failure in full, and one summary line last.
 */
export default class TestReporter extends Transform {
  #pending = ''
  /** The lines of the top-level file being read, for its report if it fails. */
  #block: string[] = []
  /** The names of the subtests enclosing the line being read, by depth. */
  #path: string[] = []
  readonly #skips: string[] = []
  readonly #failures: string[][] = []
  #files = 0
  #failed = 0
  #summary = ''

  override _transform (chunk: Buffer | string, _encoding: BufferEncoding, done: TransformCallback): void {
    const lines = (this.#pending + chunk.toString()).split('\n')
    this.#pending = lines.pop() ?? ''
    for (const line of lines) this.#read(line)
    done()
  }

  override _flush (done: TransformCallback): void {
    if (this.#pending !== '') this.#read(this.#pending)
    const out: string[] = []
    if (this.#skips.length > 0) out.push('', `Skipped (${this.#skips.length}):`, ...this.#skips.map((skip) => `  ${skip}`))
    for (const failure of this.#failures) out.push('', ...failure)
    const passed = this.#files - this.#failed
    out.push('', `${this.#failed === 0 ? 'PASS' : 'FAIL'}: ${passed} of ${this.#files} test files passed, ${this.#failed} failed, ${this.#skips.length} tests skipped${this.#summary === '' ? '' : `; ${this.#summary}`}`, '')
    this.push(out.join('\n'))
    done()
  }

  #read (line: string): void {
    const subtest = SUBTEST.exec(line)
    if (subtest !== null) {
      const depth = subtest[1]!.length / 4
      this.#path = [...this.#path.slice(0, depth), subtest[2]!]
      if (depth === 0) this.#block = []
    }
    if (line.startsWith('    ') || line.startsWith('# Subtest')) {
      this.#block.push(line)
    }
    const skip = SKIP.exec(line)
    if (skip !== null && skip[1]!.length > 0) this.#skips.push(`${this.#path.slice(0, skip[1]!.length / 4).join(' > ')} > ${skip[2]!}: ${skip[3]!}`)
    const total = /^# (\{ total: .*\})$/.exec(line)
    if (total !== null) this.#summary = `assertions ${total[1]!}`
    const file = FILE_RESULT.exec(line)
    if (file === null) return
    this.#files++
    if (file[3] === 'SKIP') this.#skips.push(`${file[2]!}: ${file[4]!.trim()}`)
    if (file[1] === undefined) return
    this.#failed++
    this.#failures.push([`✖ ${file[2]!}`, ...failedLines(this.#block)])
    this.push(`✖ ${file[2]!} failed (in full at the end)\n`)
  }
}

import { spawnSync } from 'node:child_process'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import t from 'tap'
import { projectRoot } from '../../../lib/project-root.js'
import { DEV_BUILD } from '../../../dev/tools/service-process.js'

// Planted tap scripts beside the build, where they resolve `tap` as the real test files do.
const planted = join(DEV_BUILD, `.planted-${process.pid}`)
mkdirSync(planted, { recursive: true })
t.teardown(() => rmSync(planted, { recursive: true, force: true }))

function plant (name: string, source: string): string {
  writeFileSync(join(planted, name), `import t from 'tap'\n${source}\n`)
  return relative(projectRoot, join(planted, name))
}

const passing = plant('passing.test.js', "t.test('adds', async (t) => { t.equal(1 + 1, 2) })")
const failing = plant('failing.test.js', "t.test('compares', async (t) => { t.equal(1, 2, 'one is two') })")
const skipping = plant('skipping.test.js', "t.test('needs a program', { skip: 'haproxy is not installed' }, async () => {})")
const crashing = plant('crashing.test.js', "t.pass('started')\nprocess.exit(3)")
const hanging = plant('hanging.test.js', "t.test('waits', async () => { await new Promise(() => {}) })\nsetInterval(() => {}, 1000)")

function runner (...args: string[]) {
  const run = spawnSync(process.execPath, [join(DEV_BUILD, 'dev', 'tools', 'test-runner.js'), ...args], { cwd: projectRoot, encoding: 'utf8', timeout: 60_000 })
  return { status: run.status, lines: run.stdout.trimEnd().split('\n') }
}

t.test('passing and skipped files pass; the skip is listed with its reason, then one summary line, then the longest files', async (t) => {
  const { status, lines } = runner(passing, skipping)
  t.equal(status, 0)
  t.ok(lines.includes(`  ${skipping} > needs a program: haproxy is not installed`), 'the skip and its reason', { lines })
  t.match(lines.at(-2), /^PASS: 2 of 2 test files passed, 0 failed, 1 tests skipped; assertions \{ total: 2, pass: 1, skip: 1 \}$/, 'the skip is no failure')
  t.match(lines.at(-1), /^Longest files \(of \d+ s in all files\): /)
  t.equal(lines.filter((line) => /^(PASS|FAIL):/.test(line)).length, 1, 'one summary line')
})

t.test('a failing file fails the run: named as it ends, in full after the skips, the summary last; plain text', async (t) => {
  const { status, lines } = runner(failing, passing)
  t.equal(status, 1)
  t.equal(lines[0], `✖ ${failing} failed (in full at the end)`)
  const inFull = lines.indexOf(`✖ ${failing}`)
  t.ok(inFull > 0 && lines.slice(inFull).some((line) => line.includes('not ok 1 - one is two')), 'the failure in full, with its assertion', { lines })
  t.match(lines.at(-2), /^FAIL: 1 of 2 test files passed, 1 failed/)
  t.notOk(lines.some((line) => line.includes('\u001b')), 'no terminal codes')
})

t.test('a file that exits non-zero without a failed assertion fails the run too', async (t) => {
  const { status, lines } = runner(crashing)
  t.equal(status, 1)
  t.ok(lines.includes(`✖ ${crashing} failed (in full at the end)`), 'named', { lines })
  t.ok(lines.some((line) => line === 'exited with code 3'), 'with its exit code', { lines })
})

t.test('a file past its timeout fails the run, said as its own timeout with the seconds it ran', async (t) => {
  const { status, lines } = runner('--timeout=2', hanging)
  t.equal(status, 1)
  const ended = lines.find((line) => line.startsWith('ended by SIGALRM after'))
  t.match(ended, /ended by SIGALRM after [1-9]\d? s \(its timeout\)$/, 'the seconds it ran, not the runner\'s kill bound', { lines })
})

t.test('the longest file starts first, whatever its place among the files given', async (t) => {
  mkdirSync(join(planted, 'test/monitoring'), { recursive: true })
  const longest = plant('test/monitoring/alerting-scenarios.slow.test.js', "t.test('waits out real time', async (t) => { t.equal(1, 2, 'stands for it') })")
  const { lines } = runner('--jobs=1', failing, longest)
  t.same(lines.filter((line) => / failed \(in full at the end\)$/.test(line)), [`✖ ${longest} failed (in full at the end)`, `✖ ${failing} failed (in full at the end)`], 'run one at a time: the longest ends first', { lines })
})

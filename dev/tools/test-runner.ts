import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { parseArgs } from 'node:util'
import { projectRoot } from '../../lib/project-root.js'
import { DEV_BUILD } from './service-process.js'
import TestReporter from './test-reporter.js'

/*
 * Runs the compiled test files (dist-dev/test/), each a tap script under plain node, a few side by
 * side, and reports their TAP through dev/tools/test-reporter.ts. tap's own runner preloads two
 * module loaders into every test process (@tapjs/processinfo, @tapjs/mock), which cost a file
 * seconds of CPU (decision 0076). The files use tap's library as before.
 *
 *   node dist-dev/dev/tools/test-runner.js [--slow] [--jobs N] [--coverage] [test/x.test.ts ...]
 *
 * Without files: every *.test.js but the slow ones (--slow: the slow ones alone).
 */
const { values: options, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    slow: { type: 'boolean', default: false },
    // Five: the files mostly wait on real time (TTLs, timeouts, child processes); a sixth gains little on two cores.
    jobs: { type: 'string', default: '5' },
    coverage: { type: 'boolean', default: false },
    timeout: { type: 'string', default: '180' }
  }
})

// Where c8 (.c8rc.json) reads the coverage the files write.
const COVERAGE_DIRECTORY = join(projectRoot, '.tap', 'coverage')
const timeoutSeconds = Number(options.timeout)
// Past its timeout, a file's tap ends it. A file may raise its own (t.setTimeout, the alerting
// scenarios take 10 minutes); one that cannot even end itself is killed this long after the default.
const KILL_GRACE_MS = 15 * 60_000

/** The compiled test files whose source is still there: a file moved or removed leaves its old build behind. */
function testFiles (directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name)
    if (entry.isDirectory()) return testFiles(path)
    const source = join(projectRoot, relative(DEV_BUILD, path).replace(/\.js$/, '.ts'))
    return entry.name.endsWith('.test.js') && existsSync(source) ? [relative(projectRoot, path)] : []
  }).sort()
}

/** A source name (test/x.test.ts) or a compiled one (dist-dev/test/x.test.js), as the build's file. */
function compiled (file: string): string {
  const name = file.replace(/^\.\//, '')
  return name.endsWith('.ts') ? join(relative(projectRoot, DEV_BUILD), name.replace(/\.ts$/, '.js')) : name
}

/**
 * Files that take far longer than any other (the alerting run waits out the shipped timings in real
 * time, about 11 minutes, mostly waiting): they start first, so that the other jobs run the rest
 * meanwhile rather than after them. `test:slow` runs three jobs: the waiting one and two that work.
 */
const LONGEST_FIRST = [
  'test/monitoring/alerting-scenarios.slow.test.js',
  // npm test's longest, which mostly wait on real time (TTLs, long polls, drains, child services).
  'test/routes/session-lifetimes.test.js', 'test/dev/tools/service-process.test.js', 'test/plugins/app/orders/provisioning.test.js',
  'test/routes/api/orders-resume.test.js', 'test/plugins/app/platform-events/platform-events.test.js', 'test/shutdown.test.js'
]
/** Where a file stands in LONGEST_FIRST: the files listed go first, in its order. */
const rank = (file: string) => {
  const index = LONGEST_FIRST.findIndex((name) => file.endsWith(name))
  return index === -1 ? LONGEST_FIRST.length : index
}

/**
 * How long each file took in this checkout's last runs: the longer ones start first, so that a long
 * file started last does not run on alone at the end (a fresh clone has none and keeps the order).
 */
const DURATIONS_FILE = join(projectRoot, 'logs', 'test-durations.json')
function lastDurations (): Record<string, number> {
  try {
    return JSON.parse(readFileSync(DURATIONS_FILE, 'utf8')) as Record<string, number>
  } catch {
    return {}
  }
}
const durations = lastDurations()

const files = (positionals.length > 0
  ? positionals.map(compiled)
  : testFiles(join(DEV_BUILD, 'test')).filter((file) => file.endsWith('.slow.test.js') === options.slow))
  .sort((a, b) => rank(a) - rank(b) || (durations[b] ?? 0) - (durations[a] ?? 0))

/** A file's assertion counts, as its tap prints them last: total, pass, fail, skip, todo. */
type Counts = Record<string, number>

/** `reason`: why the runner failed a file whose TAP may not say (a signal, an exit code). */
interface Result { file: string, ok: boolean, output: string, ms: number, counts: Counts, reason?: string | undefined }

function run (file: string): Promise<Result> {
  const started = performance.now()
  const child = spawn(process.execPath, ['--enable-source-maps', file], {
    cwd: projectRoot,
    env: {
      ...process.env,
      TAP_TIMEOUT: String(timeoutSeconds),
      ...options.coverage && { NODE_V8_COVERAGE: COVERAGE_DIRECTORY }
    },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  let output = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (chunk: string) => { output += chunk })
  let killed = false
  const kill = setTimeout(() => {
    killed = true
    child.kill('SIGKILL')
  }, timeoutSeconds * 1000 + KILL_GRACE_MS)
  return new Promise((resolve) => {
    child.on('close', (code, signal) => {
      clearTimeout(kill)
      const seconds = Math.round((performance.now() - started) / 1000)
      const summary = /^# \{ (total: .*) \}$/m.exec(output)?.[1] ?? ''
      const counts = Object.fromEntries([...summary.matchAll(/(\w+): (\d+)/g)].map(([, name, count]) => [name!, Number(count)]))
      const failed = code !== 0 || /^not ok /m.test(output)
      // tap ends a file past its timeout with SIGALRM, after printing what was still open.
      let reason: string | undefined
      if (killed) reason = `killed by the runner after ${seconds} s`
      else if (signal !== null) reason = `ended by ${signal} after ${seconds} s${signal === 'SIGALRM' ? ' (its timeout)' : ''}`
      else if (failed && !/^\s*not ok /m.test(output)) reason = `exited with code ${String(code)}`
      resolve({ file, ok: !failed, output, ms: performance.now() - started, counts, reason })
    })
  })
}

/** A file's TAP as a subtest of the run's, as tap's runner writes it. */
function asSubtest (result: Result, index: number): string {
  const lines = result.output.split('\n').filter((line) => line !== '' && !line.startsWith('TAP version'))
  return [
    `# Subtest: ${result.file}`,
    ...lines.map((line) => `    ${line}`),
    `${result.ok ? 'ok' : 'not ok'} ${index} - ${result.file} # time=${result.ms.toFixed(0)}ms`,
    ...result.reason === undefined ? [] : ['  ---', `  reason: ${JSON.stringify(result.reason)}`, '  ...'],
    ''
  ].join('\n')
}

if (options.coverage) rmSync(COVERAGE_DIRECTORY, { recursive: true, force: true })
const reporter = new TestReporter()
reporter.pipe(process.stdout)
reporter.write('TAP version 14\n')

const queue = [...files]
const results: Result[] = []
async function worker (): Promise<void> {
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    const result = await run(file)
    results.push(result)
    reporter.write(asSubtest(result, results.length))
  }
}
await Promise.all(Array.from({ length: Math.max(1, Number(options.jobs)) }, () => worker()))

const counts: Counts = {}
for (const result of results) for (const [name, count] of Object.entries(result.counts)) counts[name] = (counts[name] ?? 0) + count
reporter.end(`1..${results.length}\n# { ${Object.entries(counts).map(([name, count]) => `${name}: ${count}`).join(', ')} }\n`)
await new Promise((resolve) => reporter.once('end', resolve))
// The files that set the run's length, for whoever wants it shorter.
const slowest = [...results].sort((a, b) => b.ms - a.ms)
const total = results.reduce((sum, { ms }) => sum + ms, 0)
process.stdout.write(`Longest files (of ${(total / 1000).toFixed(0)} s in all files): ${slowest.slice(0, 8).map(({ file, ms }) => `${relative(join(relative(projectRoot, DEV_BUILD), 'test'), file)} ${(ms / 1000).toFixed(0)} s`).join(', ')}\n`)
mkdirSync(join(projectRoot, 'logs'), { recursive: true })
writeFileSync(DURATIONS_FILE, JSON.stringify({ ...durations, ...Object.fromEntries(results.map(({ file, ms }) => [file, Math.round(ms)])) }, null, 1))
process.exitCode = results.every(({ ok }) => ok) && results.length > 0 ? 0 : 1

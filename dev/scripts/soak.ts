import { spawn } from 'node:child_process'
import { parseArgs } from 'node:util'
import { projectRoot } from '../../lib/project-root.js'

/**
 * `npm run soak -- --minutes 10`: runs test/app/soak.slow.test.ts for that long (`npm run test:slow`,
 * which CI runs, runs it for 60 s). tap's own per-file timeout is raised to cover the soak and its drain.
 */
const { values } = parseArgs({ options: { minutes: { type: 'string', default: '1' } } })
const minutes = Number(values.minutes)
if (!Number.isFinite(minutes) || minutes < 1) {
  process.stderr.write(`--minutes must be a number of at least 1 (got '${values.minutes}')\n`)
  process.exit(2)
}
const seconds = Math.round(minutes * 60)
const tap = spawn('npx', ['tap', '--disable-coverage', `--timeout=${seconds + 300}`, 'dist-dev/test/app/soak.slow.test.js'], {
  cwd: projectRoot,
  env: { ...process.env, SOAK_SECONDS: String(seconds) },
  stdio: 'inherit'
})
tap.on('exit', (code, signal) => process.exit(code ?? (signal === null ? 1 : 128)))

import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { projectRoot } from '../../lib/project-root.js'
import { DEV_BUILD } from '../tools/service-process.js'

/**
 * `npm run soak -- --minutes 10`: runs test/app/soak.slow.test.ts for that long (`npm run test:slow`,
 * which CI runs, runs it for 60 s). The file's timeout is raised to cover the soak and its drain.
 */
const { values } = parseArgs({ options: { minutes: { type: 'string', default: '1' } } })
const minutes = Number(values.minutes)
if (!Number.isFinite(minutes) || minutes < 1) {
  process.stderr.write(`--minutes must be a number of at least 1 (got '${values.minutes}')\n`)
  process.exit(2)
}
const seconds = Math.round(minutes * 60)
const tap = spawn(process.execPath, [join(DEV_BUILD, 'dev', 'tools', 'test-runner.js'), `--timeout=${seconds + 300}`, 'test/app/soak.slow.test.ts'], {
  cwd: projectRoot,
  env: { ...process.env, SOAK_SECONDS: String(seconds) },
  stdio: 'inherit'
})
tap.on('exit', (code, signal) => process.exit(code ?? (signal === null ? 1 : 128)))

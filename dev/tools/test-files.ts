import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'

/*
 * `npm run test:files -- test/routes/health.test.ts ...`: tap over the named test files as
 * `npm run build:dev` compiled them (dist-dev/test/), without coverage. Other arguments go to tap.
 */
const args = process.argv.slice(2).map((arg) => /^(\.\/)?test\/.*\.ts$/.test(arg)
  ? join('dist-dev', arg.replace(/^\.\//, '').replace(/\.ts$/, '.js'))
  : arg)
const tap = spawnSync(join(projectRoot, 'node_modules', '.bin', 'tap'), ['--disable-coverage', ...args], { cwd: projectRoot, stdio: 'inherit' })
process.exitCode = tap.status ?? 1

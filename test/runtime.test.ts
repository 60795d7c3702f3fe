import t from 'tap'
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { projectRoot } from '../lib/project-root.js'
import { requiredNodeMajor, runtimeRefusal } from '../lib/runtime.js'
import { DEV_BUILD } from '../dev/tools/service-process.js'
import { tempDir, testEnv } from './helpers/app.js'

const required = requiredNodeMajor()
const entry = join(DEV_BUILD, 'server.js')

t.test('the runtime is Node.js 24, named alike wherever it is set', async (t) => {
  t.equal(required, 24, 'package.json engines')
  t.equal(readFileSync(join(projectRoot, '.nvmrc'), 'utf8').trim(), String(required), '.nvmrc')
  const packageJson = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }
  t.match(packageJson.devDependencies.node, new RegExp(`^\\^${required}\\.`), 'the node package npm ci installs')
  const bases = [...readFileSync(join(projectRoot, 'Dockerfile'), 'utf8').matchAll(/^FROM (\S+)/gm)].map(([, image]) => image)
  t.strictSame(bases, [`node:${required}-bookworm-slim`, `node:${required}-bookworm-slim`], 'both stages of the image')
  t.equal(process.versions.node.split('.')[0], String(required), 'and the tests run on it')
})

t.test('an older runtime is refused with one line naming the version required', async (t) => {
  t.match(runtimeRefusal('20.20.2'), /^Portal BFF needs Node\.js 24 or later; this is Node\.js 20\.20\.2\./)
  t.equal(runtimeRefusal('24.0.0'), undefined)
  t.equal(runtimeRefusal('26.1.0'), undefined)
})

/** Runs the service's entry; answers its exit code, stderr, and whether it wrote any log. */
function runEntry (node: string, args: string[]) {
  const logDir = tempDir('runtime-logs')
  const run = spawnSync(node, [...args, entry], { env: { ...testEnv({ LOG_DIR: logDir }), PATH: process.env.PATH ?? '' }, encoding: 'utf8', timeout: 60_000 })
  return { status: run.status, stderr: run.stderr, logs: existsSync(logDir) ? readdirSync(logDir) : [] }
}

t.test('the entry refuses an older Node.js before anything else runs', async (t) => {
  // process.versions made to say 20 before the entry loads: the check runs first, or not at all.
  const pretend = 'data:text/javascript,Object.defineProperty(process,"versions",{value:{...process.versions,node:"20.20.2"}})'
  const run = runEntry(process.execPath, ['--import', pretend])
  t.equal(run.status, 1)
  t.equal(run.stderr.trim().split('\n').length, 1, 'one line')
  t.match(run.stderr, /needs Node\.js 24 or later; this is Node\.js 20\.20\.2/)
  t.strictSame(run.logs, [], 'no log file opened, no dependency touched')
})

const system = '/usr/bin/node'
const systemVersion = existsSync(system) ? execFileSync(system, ['--version'], { encoding: 'utf8' }).trim().slice(1) : undefined
const systemIsOlder = systemVersion !== undefined && runtimeRefusal(systemVersion) !== undefined

t.test('the system\'s own older Node.js, where the machine has one, is refused the same way', {
  skip: systemIsOlder ? false : `no Node.js older than ${required} at ${system}`
}, async (t) => {
  const version = systemVersion ?? ''
  const run = runEntry(system, [])
  t.equal(run.status, 1)
  t.match(run.stderr, new RegExp(`needs Node\\.js 24 or later; this is Node\\.js ${version.replaceAll('.', '\\.')}`))
})

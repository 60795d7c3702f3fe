import { execFileSync } from 'node:child_process'
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import * as processes from '../../dev/tools/service-process.js'

export type { ServiceProcess } from '../../dev/tools/service-process.js'

// The child runs the development entry (the service, with the sandbox for unset upstreams) as
// `npm start` does: its build under plain node when the build is current (`npm test` builds it
// first), else dev/server.ts with the TypeScript loaders this test runs under. The loaders cost a
// child 3-5 s of CPU, which on a busy machine made a start miss its time.
const source = { entry: join(projectRoot, 'dev', 'server.ts'), execArgv: process.execArgv }
const loaderEnv = Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] =>
  /^(TS_NODE_|_TAPJS_PROCESSINFO_)/.test(entry[0]) && entry[1] !== undefined))
const builtEntry = join(processes.DEV_BUILD, 'dev', 'server.js')
const SOURCE_FOLDERS = ['plugins', 'routes', 'integrations', 'schemas', 'lib', 'dev']

/** The newest modification time of the TypeScript sources the development build is made of. */
function newestSource (path: string): number {
  const stats = statSync(path)
  if (!stats.isDirectory()) return path.endsWith('.ts') ? stats.mtimeMs : 0
  return Math.max(0, ...readdirSync(path).map((name) => newestSource(join(path, name))))
}

let childEntry: { entry: string, execArgv: string[], env: Record<string, string> } | undefined

function serviceEntry () {
  if (childEntry !== undefined) return childEntry
  let built = 0
  try {
    built = statSync(builtEntry).mtimeMs
  } catch {}
  const newest = Math.max(...['app.ts', 'server.ts', 'settings.ts', ...SOURCE_FOLDERS].map((name) => newestSource(join(projectRoot, name))))
  childEntry = built >= newest ? { entry: builtEntry, execArgv: [], env: {} } : { ...source, env: loaderEnv }
  return childEntry
}

// A test's service waits for no balancer when it stops, unless the test sets the delay it measures.
const NO_SHUTDOWN_DELAY = { SHUTDOWN_DELAY_MS: '0' }

export function runServer (env: Record<string, string>) {
  const { entry, execArgv, env: entryEnv } = serviceEntry()
  return processes.runServer({ entry, execArgv, env: { ...entryEnv, ...NO_SHUTDOWN_DELAY, ...env } })
}

export function startService (env: Record<string, string>, timeoutMs?: number) {
  const { entry, execArgv, env: entryEnv } = serviceEntry()
  return processes.startService({ entry, execArgv, env: { ...entryEnv, ...NO_SHUTDOWN_DELAY, ...env } }, timeoutMs)
}

/**
 * Builds the development entry and starts it under plain node, as `npm start` runs it: for tests
 * that measure the process itself (its memory), which the TypeScript loader and coverage would skew.
 */
export function startBuiltService (env: Record<string, string>, { execArgv = [], timeoutMs }: { execArgv?: string[], timeoutMs?: number } = {}) {
  execFileSync(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', join(projectRoot, 'tsconfig.dev.json')], { stdio: 'inherit' })
  return processes.startService({ entry: join(processes.DEV_BUILD, 'dev', 'server.js'), execArgv, env: { ...NO_SHUTDOWN_DELAY, ...env } }, timeoutMs)
}

let productBuilt = false

/**
 * Builds the service as `npm run build` does (once per test file) and starts its production entry,
 * dist/server.js, under plain node: the process as deployed. The upstream settings must be given.
 */
export function startProductService (env: Record<string, string>, timeoutMs?: number) {
  if (!productBuilt) {
    execFileSync(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', join(projectRoot, 'tsconfig.build.json')], { stdio: 'inherit' })
    productBuilt = true
  }
  return processes.startService({ entry: join(projectRoot, 'dist', 'server.js'), env: { ...NO_SHUTDOWN_DELAY, ...env } }, timeoutMs)
}

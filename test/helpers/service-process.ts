import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import * as processes from '../../dev/tools/service-process.js'

export type { ServiceProcess } from '../../dev/tools/service-process.js'

// The child runs the development entry (dev/server.ts: the service, with the sandbox for unset
// upstreams) with the TypeScript loaders this test runs under, as `npm start` runs its build.
const source = { entry: join(projectRoot, 'dev', 'server.ts'), execArgv: process.execArgv }
const loaderEnv = Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] =>
  /^(TS_NODE_|_TAPJS_PROCESSINFO_)/.test(entry[0]) && entry[1] !== undefined))

// A test's service waits for no balancer when it stops, unless the test sets the delay it measures.
const NO_SHUTDOWN_DELAY = { SHUTDOWN_DELAY_MS: '0' }

export function runServer (env: Record<string, string>) {
  return processes.runServer({ ...source, env: { ...loaderEnv, ...NO_SHUTDOWN_DELAY, ...env } })
}

export function startService (env: Record<string, string>, timeoutMs?: number) {
  return processes.startService({ ...source, env: { ...loaderEnv, ...NO_SHUTDOWN_DELAY, ...env } }, timeoutMs)
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

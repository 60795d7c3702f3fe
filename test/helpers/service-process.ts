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

export function runServer (env: Record<string, string>) {
  return processes.runServer({ ...source, env: { ...loaderEnv, ...env } })
}

export function startService (env: Record<string, string>, timeoutMs?: number) {
  return processes.startService({ ...source, env: { ...loaderEnv, ...env } }, timeoutMs)
}

/**
 * Builds the development entry and starts it under plain node, as `npm start` runs it: for tests
 * that measure the process itself (its memory), which the TypeScript loader and coverage would skew.
 */
export function startBuiltService (env: Record<string, string>, { execArgv = [], timeoutMs }: { execArgv?: string[], timeoutMs?: number } = {}) {
  execFileSync(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', join(projectRoot, 'tsconfig.dev.json')], { stdio: 'inherit' })
  return processes.startService({ entry: join(processes.DEV_BUILD, 'dev', 'server.js'), execArgv, env }, timeoutMs)
}

import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import * as processes from '../../dev/tools/service-process.js'

export type { ServiceProcess } from '../../dev/tools/service-process.js'

// The child runs the development entry (the service, with the sandbox for unset upstreams) as
// `npm start` does: its build, under plain node, compiled with these tests by `npm run build:dev`.
const entry = join(processes.DEV_BUILD, 'dev', 'server.js')

// A test's service waits for no balancer when it stops, unless the test sets the delay it measures.
const NO_SHUTDOWN_DELAY = { SHUTDOWN_DELAY_MS: '0' }

export function runServer (env: Record<string, string>) {
  return processes.runServer({ entry, env: { ...NO_SHUTDOWN_DELAY, ...env } })
}

/** `execArgv`: node flags of the service's own (the soak's inspector). */
export function startService (env: Record<string, string>, { execArgv = [], timeoutMs }: { execArgv?: string[], timeoutMs?: number } = {}) {
  return processes.startService({ entry, execArgv, env: { ...NO_SHUTDOWN_DELAY, ...env } }, timeoutMs)
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

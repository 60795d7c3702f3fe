import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import * as processes from '../../tools/service-process.js'

export type { ServiceProcess } from '../../tools/service-process.js'

// The child runs server.ts with the TypeScript loaders this test runs under, as `npm start` would run dist/.
const source = { entry: join(projectRoot, 'server.ts'), execArgv: process.execArgv }

export function runServer (env: Record<string, string>) {
  return processes.runServer({ ...source, env })
}

export function startService (env: Record<string, string>, timeoutMs?: number) {
  return processes.startService({ ...source, env }, timeoutMs)
}

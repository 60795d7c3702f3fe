import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import * as processes from '../../tools/service-process.js'

export type { ServiceProcess } from '../../tools/service-process.js'

// The child runs server.ts with the TypeScript loaders this test runs under, and their settings
// (transpile only, coverage), as `npm start` would run dist/.
const source = { entry: join(projectRoot, 'server.ts'), execArgv: process.execArgv }
const loaderEnv = Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] =>
  /^(TS_NODE_|_TAPJS_PROCESSINFO_)/.test(entry[0]) && entry[1] !== undefined))

export function runServer (env: Record<string, string>) {
  return processes.runServer({ ...source, env: { ...loaderEnv, ...env } })
}

export function startService (env: Record<string, string>, timeoutMs?: number) {
  return processes.startService({ ...source, env: { ...loaderEnv, ...env } }, timeoutMs)
}

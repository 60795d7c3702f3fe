import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'
import { exited } from './processes.js'

export interface ServiceProcess {
  child: ChildProcess
  url: string
  /** Every JSON line the service printed so far. */
  lines: Array<Record<string, unknown>>
  stderr: () => string
  exit: Promise<number | null>
}

/** Runs server.ts in a child process, with the loaders this test runs under, as `npm start` would. */
export function runServer (env: Record<string, string>): { child: ChildProcess, exit: Promise<number | null>, stdout: () => string, stderr: () => string } {
  const child = spawn(process.execPath, [...process.execArgv, join(projectRoot, 'server.ts')], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  return { child, exit: exited(child), stdout: () => stdout, stderr: () => stderr }
}

/** Starts the service on an ephemeral port and resolves once it listens. */
export async function startService (env: Record<string, string>, timeoutMs = 30_000): Promise<ServiceProcess> {
  const { child, exit, stderr } = runServer({ PORT: '0', ...env })
  const lines: Array<Record<string, unknown>> = []
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`service did not listen in time: ${stderr()}`)), timeoutMs)
    exit.then((code) => reject(new Error(`service exited with ${code}: ${stderr()}`)), reject)
    createInterface({ input: child.stdout! }).on('line', (text) => {
      let line: Record<string, unknown>
      try {
        line = JSON.parse(text)
      } catch {
        return
      }
      lines.push(line)
      const listening = /Server listening at (http:\/\/127\.0\.0\.1:[0-9]+)/.exec(String(line.message))
      if (listening?.[1] !== undefined) {
        clearTimeout(timer)
        resolve(listening[1])
      }
    })
  })
  return { child, url, lines, stderr, exit }
}

import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { projectRoot } from '../../lib/project-root.js'

/** Where `npm run build:dev` compiles the harness (and the product it runs) to. */
export const DEV_BUILD = join(projectRoot, 'dist-dev')

export interface ServiceProcess {
  child: ChildProcess
  url: string
  /** Every JSON line the service printed so far. */
  lines: Array<Record<string, unknown>>
  stderr: () => string
  exit: Promise<number | null>
}

export interface RunOptions {
  /** The script to run: dev/server.ts under a TypeScript loader, or its build in dist-dev/. */
  entry: string
  /** The Node.js binary; this process's own when unset. */
  node?: string
  execArgv?: string[]
  env: Record<string, string>
}

export function exited (child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode)
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)))
}

export function runServer ({ entry, node = process.execPath, execArgv = [], env }: RunOptions): { child: ChildProcess, exit: Promise<number | null>, stderr: () => string } {
  const child = spawn(node, [...execArgv, entry], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  return { child, exit: exited(child), stderr: () => stderr }
}

/** How many of its last lines a child that failed to start is reported with, of each stream. */
const REPORTED_LINES = 20

/** The last lines of a child's stdout and stderr, for the message of a start that failed. */
export function lastOutput (stdout: string[], stderr: string): string {
  const tail = (name: string, lines: string[]) => lines.length === 0 ? [`${name}: (nothing)`] : lines.slice(-REPORTED_LINES).map((line) => `${name}: ${line}`)
  return [...tail('stdout', stdout), ...tail('stderr', stderr.split('\n').filter((line) => line !== ''))].join('\n')
}

/** Starts the service on an ephemeral port and resolves once it listens. */
export async function startService (options: RunOptions, timeoutMs = 30_000): Promise<ServiceProcess> {
  const { child, exit, stderr } = runServer({ ...options, env: { PORT: '0', ...options.env } })
  const lines: Array<Record<string, unknown>> = []
  const recent: string[] = []
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`service did not listen within ${timeoutMs} ms; its last output:\n${lastOutput(recent, stderr())}`))
    }, timeoutMs)
    exit.then((code) => reject(new Error(`service exited with ${code} before it listened; its last output:\n${lastOutput(recent, stderr())}`)), reject)
    createInterface({ input: child.stdout! }).on('line', (text) => {
      recent.push(text)
      if (recent.length > REPORTED_LINES) recent.shift()
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

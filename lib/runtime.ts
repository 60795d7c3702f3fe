import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { projectRoot } from './project-root.js'

/** The oldest Node.js major this service runs on, read from package.json's `engines.node` (`>=24`). */
export function requiredNodeMajor (): number {
  const { engines } = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as {
    engines?: { node?: string }
  }
  const major = /^>=\s*(\d+)/.exec(engines?.node ?? '')?.[1]
  if (major === undefined) throw new Error('package.json has no engines.node of the form ">=N"')
  return Number(major)
}

/** Why this runtime cannot run the service, or undefined when it can. */
export function runtimeRefusal (version: string = process.versions.node): string | undefined {
  const required = requiredNodeMajor()
  const major = Number(version.split('.', 1)[0])
  if (major >= required) return undefined
  return `Portal BFF needs Node.js ${required} or later; this is Node.js ${version}. ` +
    `Install Node.js ${required} (the current LTS line), or run it through npm, whose scripts use the Node.js ${required} that npm ci installs.`
}

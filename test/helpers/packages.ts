import { accessSync, appendFileSync, constants } from 'node:fs'
import { delimiter, join } from 'node:path'

/** The programs some tests run, each with the Debian package that installs it. */
export const DEBIAN_PACKAGES = {
  haproxy: 'haproxy',
  openssl: 'openssl',
  pgbouncer: 'pgbouncer',
  prometheus: 'prometheus',
  promtool: 'prometheus',
  'prometheus-alertmanager': 'prometheus-alertmanager',
  amtool: 'prometheus-alertmanager',
  chromium: 'chromium'
} as const

export type PackagedProgram = keyof typeof DEBIAN_PACKAGES

/**
 * Set by `.ci/run`: a file each skip for a missing package is written to, so that CI, which installs
 * them all, fails when one was skipped anyway.
 */
const SKIP_LOG = 'PORTAL_BFF_PACKAGE_SKIPS'

/** The program on the PATH (programs of /usr/sbin too: root's PATH holds it), or undefined. */
export function findProgram (program: PackagedProgram, path = process.env.PATH ?? ''): string | undefined {
  for (const directory of path.split(delimiter).filter((entry) => entry !== '')) {
    const candidate = join(directory, program)
    try {
      accessSync(candidate, constants.X_OK)
      return candidate
    } catch {}
  }
  return undefined
}

/**
 * A test's `skip` option: false when every program is on the PATH, else the reason, naming the
 * missing programs and their Debian packages (also written to the CI's skip log).
 */
export function skipWithout (programs: PackagedProgram[], path = process.env.PATH ?? ''): string | false {
  const missing = programs.filter((program) => findProgram(program, path) === undefined)
  if (missing.length === 0) return false
  const packages = [...new Set(missing.map((program) => DEBIAN_PACKAGES[program]))]
  const reason = `${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed (Debian ${packages.length === 1 ? 'package' : 'packages'} ${packages.join(', ')}; .ci/run installs ${packages.length === 1 ? 'it' : 'them'})`
  const log = process.env[SKIP_LOG]
  if (log !== undefined && log !== '' && path === process.env.PATH) appendFileSync(log, `${reason}\n`)
  return reason
}

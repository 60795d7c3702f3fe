import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { pathToFileURL } from 'node:url'
import t from 'tap'
import { projectRoot } from '../lib/project-root.js'
import { DEV_BUILD } from '../dev/tools/service-process.js'
import { tempDir } from './helpers/made.js'
import { DEBIAN_PACKAGES, skipWithout, type PackagedProgram } from './helpers/packages.js'

/**
 * Each test that runs a program of a Debian package, with the programs it needs. Running `npm test`
 * in a clean clone without them would double CI's time, so each one's skip is checked in its own
 * file, with a PATH that holds none of them: the tests are filtered to these (TAP_GREP) and skip
 * before they start.
 */
const PACKAGED_TESTS: Array<{ file: string, test: string, programs: PackagedProgram[] }> = [
  { file: 'test/deploy/manifests.test.ts', test: 'HAProxy: haproxy -c accepts the configuration', programs: ['haproxy', 'openssl'] },
  { file: 'test/scale/rolling-restart.slow.test.ts', test: 'rolling restart of three instances behind HAProxy', programs: ['haproxy', 'openssl'] },
  { file: 'test/plugins/app/database/pgbouncer.test.ts', test: 'migrations through PgBouncer', programs: ['pgbouncer'] },
  { file: 'test/monitoring/rules.test.ts', test: 'promtool: ', programs: ['promtool'] },
  { file: 'test/monitoring/alertmanager.test.ts', test: 'amtool: ', programs: ['amtool'] },
  { file: 'test/monitoring/alertmanager.test.ts', test: 'a real Alertmanager', programs: ['prometheus-alertmanager'] },
  { file: 'test/monitoring/prometheus-server.slow.test.ts', test: 'a real Prometheus', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/exemplars.test.ts', test: 'a real Prometheus with the shipped flags keeps the exemplar', programs: ['prometheus'] },
  { file: 'test/monitoring/crm-blind.slow.test.ts', test: 'the CRM answers 500 to the status query', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/watchdog.slow.test.ts', test: 'the Watchdog reaches its receiver', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/alerting-scenarios.slow.test.ts', test: 'a quiet instance', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/alerting-scenarios.slow.test.ts', test: 'events disabled: an order awaiting approval', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/alerting-scenarios.slow.test.ts', test: 'billing down 2 minutes, and again 5 minutes later', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/alerting-scenarios.slow.test.ts', test: 'Redis down 2 minutes, and again 5 minutes later', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/monitoring/alerting-scenarios.slow.test.ts', test: 'no instance answers', programs: ['prometheus', 'prometheus-alertmanager'] },
  { file: 'test/plugins/external/docs-ui.test.ts', test: 'in headless Chromium', programs: ['chromium'] },
  { file: 'test/routes/status.test.ts', test: 'in headless Chromium', programs: ['chromium'] },
  { file: 'test/plugins/app/platform-events/parked-events.test.ts', test: 'the status page shows the parked count', programs: ['chromium'] },
  { file: 'test/browser/portal-page.slow.test.ts', test: 'the reference page, served by the service itself', programs: ['chromium'] },
  { file: 'test/browser/portal-page.slow.test.ts', test: 'the reference page, served from another origin', programs: ['chromium'] },
  { file: 'test/browser/portal-page.slow.test.ts', test: 'sign out everywhere: a tab learns it', programs: ['chromium'] },
  { file: 'test/browser/portal-page.slow.test.ts', test: 'CSRF: a form on another site', programs: ['chromium'] },
  { file: 'test/browser/oidc-sign-in.slow.test.ts', test: 'sign in at the sandbox provider', programs: ['chromium'] },
  { file: 'test/browser/oidc-sign-in.slow.test.ts', test: 'a two-factor user signs in', programs: ['chromium'] },
  { file: 'test/browser/oidc-sign-in.slow.test.ts', test: 'a person acting for two clients', programs: ['chromium'] },
  { file: 'test/browser/oidc-sign-in.slow.test.ts', test: 'the page says why live updates are off', programs: ['chromium'] },
  { file: 'test/browser/tls-proxy.slow.test.ts', test: 'TLS at the edge', programs: ['haproxy', 'openssl', 'chromium'] },
  { file: 'test/server-dependencies.slow.test.ts', test: 'PostgreSQL that does not answer at start', programs: ['pgbouncer'] },
  { file: 'test/scale/database-maintenance.slow.test.ts', test: 'database maintenance under three instances', programs: ['haproxy', 'openssl', 'pgbouncer'] }
]

// What in a test file runs a packaged program: such a file must be in the list above.
const RUNS_A_PROGRAM = /startHaproxy\(|startShippedHaproxy\(|selfSignedCertificate\(|checkHaproxyConfig\(|PrivatePgBouncer\.|PrometheusServer\.|AlertmanagerServer\.|runAmtool\(|promtool\(\['(check', 'rules|test')|findProgram\('chromium'\)|portalBrowser\(/

function testFiles (directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name)
    if (entry.isDirectory()) return testFiles(path)
    return entry.name.endsWith('.test.ts') ? [relative(projectRoot, path)] : []
  })
}

t.test('every test file that runs a program of a Debian package is among those whose skip is checked', async (t) => {
  const running = testFiles(join(projectRoot, 'test')).filter((file) => RUNS_A_PROGRAM.test(readFileSync(join(projectRoot, file), 'utf8')))
  t.same(running.sort(), [...new Set(PACKAGED_TESTS.map(({ file }) => file))].sort())
})

t.test('a skip names each missing program and its Debian package', async (t) => {
  t.equal(skipWithout(['haproxy'], '/nonexistent'), 'haproxy is not installed (Debian package haproxy; .ci/run installs it)')
  t.equal(skipWithout(['prometheus', 'prometheus-alertmanager'], '/nonexistent'), 'prometheus and prometheus-alertmanager are not installed (Debian packages prometheus, prometheus-alertmanager; .ci/run installs them)')
  t.equal(skipWithout(['haproxy'], '/nonexistent:'), skipWithout(['haproxy'], '/nonexistent'), 'an empty PATH entry is no directory')
})

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

t.test('with none of the programs on the PATH, each of those tests skips, naming the Debian package', async (t) => {
  // One process imports every file: loading what they share once keeps this test cheap.
  const directory = tempDir('no-packages')
  const entry = join(directory, 'entry.mjs')
  const files = [...new Set(PACKAGED_TESTS.map(({ file }) => file))]
  writeFileSync(entry, files.map((file) => `await import(${JSON.stringify(pathToFileURL(join(DEV_BUILD, file.replace(/\.ts$/, '.js'))).href)})\n`).join(''))
  const run = spawnSync(process.execPath, [...process.execArgv, entry], {
    cwd: projectRoot,
    encoding: 'utf8',
    timeout: 120_000,
    // One pattern, for the top-level tests (a second line would filter their subtests); the PATH an empty directory.
    env: { PATH: directory, TAP_GREP: PACKAGED_TESTS.map(({ test }) => escaped(test)).join('|') }
  })
  t.equal(run.status, 0, 'the files pass', { output: run.stdout + run.stderr })
  const results = run.stdout.split('\n').filter((text) => /^ok \d+ - /.test(text))
  for (const { file, test, programs } of PACKAGED_TESTS) {
    const packages = programs.map((program) => DEBIAN_PACKAGES[program])
    const skipped = new RegExp(`^ok \\d+ - ${escaped(test)}.* # SKIP ${escaped(programs.join(' and '))} (is|are) not installed \\(Debian packages? ${escaped(packages.join(', '))};`)
    t.ok(results.some((line) => skipped.test(line)), `${file}, '${test}': skipped, naming ${packages.join(', ')}`, { results })
  }
})

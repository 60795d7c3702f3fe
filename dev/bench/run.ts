import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { benchBillingQueue } from './billing-queue.js'
import { benchCachedRead } from './cached-read.js'
import { benchCachedReadBuilds } from './cached-read-ab.js'
import { benchHealth } from './health.js'
import { benchHealthBuilds } from './health-ab.js'
import { benchInvoices } from './invoices.js'
import { benchHealthProfile } from './profile.js'
import { benchProvisioning } from './provisioning.js'
import { benchSessions } from './sessions.js'
import { benchStreams } from './streams.js'
import { benchFailover, benchRecovery } from './takeover.js'

// `npm run bench -- health streams` runs those suites; no argument runs all but the named-only tools below.
const suites: Record<string, () => Promise<void>> = {
  health: benchHealth,
  invoices: benchInvoices,
  'billing-queue': benchBillingQueue,
  provisioning: benchProvisioning,
  streams: benchStreams,
  recovery: benchRecovery,
  failover: benchFailover,
  'cached-read': benchCachedRead,
  sessions: benchSessions,
  'health-profile': benchHealthProfile,
  'health-ab': benchHealthBuilds,
  'cached-read-ab': benchCachedReadBuilds
}

/** Runs one suite in a process of its own; resolves with its exit code. */
function runApart (name: string): Promise<number> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), name], { stdio: 'inherit' })
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => resolve(code ?? 1))
  })
}

// Tools rather than figures of the table: run when named, not by `npm run bench` alone.
const namedOnly = new Set(['health-profile', 'health-ab', 'cached-read-ab'])

const chosen = process.argv.slice(2)
const unknown = chosen.filter((name) => !(name in suites))
if (unknown.length > 0) {
  process.stderr.write(`Unknown suite: ${unknown.join(', ')}. Suites: ${Object.keys(suites).join(', ')}\n`)
  process.exit(2)
}
const names = Object.keys(suites).filter((name) => chosen.length === 0 ? !namedOnly.has(name) : chosen.includes(name))
if (names.length === 1) {
  await suites[names[0]!]!()
} else {
  // The in-process suites measure the benchmark process itself (its event loop, its peak RSS):
  // one suite's heap and compiled code must not weigh on the next.
  for (const name of names) {
    const code = await runApart(name)
    if (code !== 0) process.exitCode = code
  }
}

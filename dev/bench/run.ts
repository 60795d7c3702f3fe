import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { benchBillingQueue } from './billing-queue.js'
import { benchHealth } from './health.js'
import { benchInvoices } from './invoices.js'
import { benchProvisioning } from './provisioning.js'

// `npm run bench -- health invoices billing-queue provisioning` runs some; no argument runs all.
const suites: Record<string, () => Promise<void>> = {
  health: benchHealth,
  invoices: benchInvoices,
  'billing-queue': benchBillingQueue,
  provisioning: benchProvisioning
}

/** Runs one suite in a process of its own; resolves with its exit code. */
function runApart (name: string): Promise<number> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), name], { stdio: 'inherit' })
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => resolve(code ?? 1))
  })
}

const chosen = process.argv.slice(2)
const unknown = chosen.filter((name) => !(name in suites))
if (unknown.length > 0) {
  process.stderr.write(`Unknown suite: ${unknown.join(', ')}. Suites: ${Object.keys(suites).join(', ')}\n`)
  process.exit(2)
}
const names = Object.keys(suites).filter((name) => chosen.length === 0 || chosen.includes(name))
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

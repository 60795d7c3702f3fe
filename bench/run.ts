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
const chosen = process.argv.slice(2)
for (const [name, run] of Object.entries(suites)) {
  if (chosen.length === 0 || chosen.includes(name)) await run()
}

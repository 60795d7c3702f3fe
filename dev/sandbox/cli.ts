import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startSandbox } from './index.js'

function port (name: string, fallback: number): number {
  const value = process.env[name]
  if (value === undefined || value === '') return fallback
  if (!/^\d+$/.test(value) || Number(value) > 65_535) throw new Error(`${name} must be a port number, got "${value}"`)
  return Number(value)
}

const host = process.env.SANDBOX_HOST ?? '127.0.0.1'
const sandbox = await startSandbox({
  billing: { host, port: port('SANDBOX_BILLING_PORT', 4001) },
  crm: { host, port: port('SANDBOX_CRM_PORT', 4002) },
  telecom: { host, port: port('SANDBOX_TELECOM_PORT', 4003) }
})
const keyDirectory = await mkdtemp(join(tmpdir(), 'portal-sandbox-'))
const keyPath = join(keyDirectory, 'crm-private-key.pem')
await writeFile(keyPath, sandbox.crm.privateKey, { mode: 0o600 })

const { CRM_PRIVATE_KEY: _inline, ...settings } = sandbox.settings
console.log([
  'Upstream sandbox running (fake billing, CRM and telecom; these credentials are sandbox values):',
  `  billing  ${sandbox.billing.url}`,
  `  crm      ${sandbox.crm.url}`,
  `  telecom  ${sandbox.telecom.url}`,
  'Controls: POST|GET|DELETE <url>/__sandbox/faults, GET|DELETE <url>/__sandbox/calls, POST <url>/__sandbox/down;',
  '  crm also: POST /__sandbox/events, POST /__sandbox/drop-sessions, POST /__sandbox/expire-tokens, PUT /__sandbox/limits',
  'Service settings:',
  ...Object.entries({ ...settings, CRM_PRIVATE_KEY_PATH: keyPath }).map(([name, value]) => `${name}=${value}`)
].join('\n'))

let stopping = false
async function stop (): Promise<void> {
  if (stopping) return
  stopping = true
  await sandbox.close()
  await rm(keyDirectory, { recursive: true, force: true })
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    stop().then(() => process.exit(0), (error: unknown) => {
      console.error(error)
      process.exit(1)
    })
  })
}

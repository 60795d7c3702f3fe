import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { UPSTREAMS } from '../../integrations/registry.js'
import { sandboxPortSetting, startSandbox } from './index.js'

function port (name: string, fallback: number): number {
  const value = process.env[name]
  if (value === undefined || value === '') return fallback
  if (!/^\d+$/.test(value) || Number(value) > 65_535) throw new Error(`${name} must be a port number, got "${value}"`)
  return Number(value)
}

const host = process.env.SANDBOX_HOST ?? '127.0.0.1'
// 4001 for the first upstream of the registry, 4002 for the next, and so on.
const sandbox = await startSandbox(Object.fromEntries(UPSTREAMS.map(({ name }, index) => [name, { host, port: port(sandboxPortSetting(name), 4001 + index) }])))
const keyDirectory = await mkdtemp(join(tmpdir(), 'portal-sandbox-'))
const keyPath = join(keyDirectory, 'crm-private-key.pem')
await writeFile(keyPath, sandbox.crm.privateKey, { mode: 0o600 })

const { CRM_PRIVATE_KEY: _inline, ...settings } = sandbox.settings
const width = Math.max(...UPSTREAMS.map(({ name }) => name.length)) + 2
console.log([
  `Upstream sandbox running (fake ${new Intl.ListFormat('en-GB').format(UPSTREAMS.map(({ title }) => title))}; these credentials are sandbox values):`,
  ...UPSTREAMS.map(({ name }) => `  ${name.padEnd(width)}${sandbox[name].url}`),
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

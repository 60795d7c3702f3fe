import type { SettingNames } from '../../integrations/descriptor.js'
import { UPSTREAMS, type ProductUpstream, type UpstreamName } from '../../integrations/registry.js'
import { BillingSimulator } from './billing.js'
import type { BillingSimulatorOptions } from './billing.js'
import { CrmSimulator } from './crm.js'
import type { CrmSimulatorOptions } from './crm.js'
import { TelecomSimulator } from './telecom.js'
import type { TelecomSimulatorOptions } from './telecom.js'
import type { Simulator } from './simulator.js'

export { BillingSimulator, defaultBillingClients, defaultBillingInvoices, defaultBillingProducts } from './billing.js'
export type { BillingClient, BillingInvoice, BillingInvoiceItem, BillingOrder, BillingProduct, BillingSimulatorOptions } from './billing.js'
export { CrmSimulator, ORDER_PROVISION_CHANNEL } from './crm.js'
export type { ApiUsage, CrmSimulatorOptions, OrderFields, OrderRecord, PlatformEventMessage, StreamingOptions, StreamingStats } from './crm.js'
export { TelecomSimulator } from './telecom.js'
export type { Activation, IdempotencyKeyUse, TelecomSimulatorOptions } from './telecom.js'
export { Simulator, parseFault } from './simulator.js'
export type { Fault, FaultKind, RecordedCall, SimulatorOptions } from './simulator.js'

/** The settings group of an upstream, as the registry's descriptor names its settings. */
type SettingsOf<Name extends UpstreamName> = Record<SettingNames<Extract<ProductUpstream, { name: Name }>>, string>

/** How the sandbox plays one upstream: its simulator, and the settings group that points the service at it. */
interface Simulated<Name extends UpstreamName, Played extends Simulator = Simulator, Options = never> {
  simulator (options?: Options): Played
  settings (simulator: Played): SettingsOf<Name>
}

/** One simulator per upstream of the registry. */
const SIMULATED = {
  billing: {
    simulator: (options?: BillingSimulatorOptions) => new BillingSimulator(options),
    settings: (billing: BillingSimulator) => ({ BILLING_API_URL: billing.apiUrl, BILLING_API_IDENTIFIER: billing.identifier, BILLING_API_SECRET: billing.secret })
  },
  crm: {
    simulator: (options?: CrmSimulatorOptions) => new CrmSimulator(options),
    settings: (crm: CrmSimulator) => ({ CRM_LOGIN_URL: crm.loginUrl, CRM_CLIENT_ID: crm.clientId, CRM_USERNAME: crm.username, CRM_PRIVATE_KEY: crm.privateKey })
  },
  telecom: {
    simulator: (options?: TelecomSimulatorOptions) => new TelecomSimulator(options),
    settings: (telecom: TelecomSimulator) => ({ TELECOM_API_URL: telecom.url, TELECOM_API_KEY: telecom.apiKey })
  }
} satisfies { [Name in UpstreamName]: Simulated<Name> }

/** Any upstream's part, as startSandbox plays it. */
interface Part {
  simulator (options?: unknown): Simulator
  settings (simulator: Simulator): Record<string, string>
}

/** Each simulator's options, under its upstream's name. */
export type SandboxOptions = { [Name in UpstreamName]?: Parameters<typeof SIMULATED[Name]['simulator']>[0] }

/** Each simulator, under its upstream's name. */
type Simulators = { [Name in UpstreamName]: ReturnType<typeof SIMULATED[Name]['simulator']> }

export type Sandbox = Simulators & {
  /** The service's environment variables that point it at this sandbox. */
  settings: Record<string, string>
  close: () => Promise<void>
}

/** The variable of `npm run sandbox` that sets the port of an upstream's simulator: `SANDBOX_CRM_PORT`. */
export function sandboxPortSetting (upstream: UpstreamName): string {
  return `SANDBOX_${upstream.toUpperCase()}_PORT`
}

/** Starts a simulator of every upstream (ephemeral ports on 127.0.0.1 unless told otherwise). */
export async function startSandbox (options: SandboxOptions = {}): Promise<Sandbox> {
  const simulated = UPSTREAMS.map(({ name }) => {
    const part: Part = SIMULATED[name]
    return { name, part, simulator: part.simulator(options[name]) }
  })
  const close = async (): Promise<void> => {
    await Promise.all(simulated.map(({ simulator }) => simulator.close()))
  }
  try {
    await Promise.all(simulated.map(({ simulator }) => simulator.start()))
  } catch (error) {
    await close()
    throw error
  }
  return {
    ...Object.fromEntries(simulated.map(({ name, simulator }) => [name, simulator])) as Simulators,
    settings: Object.assign({}, ...simulated.map(({ part, simulator }) => part.settings(simulator))),
    close
  }
}

import { BillingSimulator } from './billing.js'
import type { BillingSimulatorOptions } from './billing.js'
import { CrmSimulator } from './crm.js'
import type { CrmSimulatorOptions } from './crm.js'
import { TelecomSimulator } from './telecom.js'
import type { TelecomSimulatorOptions } from './telecom.js'

export { BillingSimulator, defaultBillingClients, defaultBillingInvoices, defaultBillingProducts } from './billing.js'
export type { BillingClient, BillingInvoice, BillingInvoiceItem, BillingOrder, BillingProduct, BillingSimulatorOptions } from './billing.js'
export { CrmSimulator, ORDER_PROVISION_CHANNEL } from './crm.js'
export type { ApiUsage, CrmSimulatorOptions, OrderFields, OrderRecord, PlatformEventMessage, StreamingOptions, StreamingStats } from './crm.js'
export { TelecomSimulator } from './telecom.js'
export type { Activation, IdempotencyKeyUse, TelecomSimulatorOptions } from './telecom.js'
export { Simulator, parseFault } from './simulator.js'
export type { Fault, FaultKind, RecordedCall, SimulatorOptions } from './simulator.js'

export interface SandboxOptions {
  billing?: BillingSimulatorOptions
  crm?: CrmSimulatorOptions
  telecom?: TelecomSimulatorOptions
}

export interface Sandbox {
  billing: BillingSimulator
  crm: CrmSimulator
  telecom: TelecomSimulator
  /** The service's environment variables that point it at this sandbox. */
  settings: Record<string, string>
  close: () => Promise<void>
}

/** Starts the three upstream simulators (ephemeral ports on 127.0.0.1 unless told otherwise). */
export async function startSandbox (options: SandboxOptions = {}): Promise<Sandbox> {
  const billing = new BillingSimulator(options.billing)
  const crm = new CrmSimulator(options.crm)
  const telecom = new TelecomSimulator(options.telecom)
  const close = async (): Promise<void> => {
    await Promise.all([billing.close(), crm.close(), telecom.close()])
  }
  try {
    await Promise.all([billing.start(), crm.start(), telecom.start()])
  } catch (error) {
    await close()
    throw error
  }
  return {
    billing,
    crm,
    telecom,
    settings: {
      BILLING_API_URL: billing.apiUrl,
      BILLING_API_IDENTIFIER: billing.identifier,
      BILLING_API_SECRET: billing.secret,
      CRM_LOGIN_URL: crm.loginUrl,
      CRM_CLIENT_ID: crm.clientId,
      CRM_USERNAME: crm.username,
      CRM_PRIVATE_KEY: crm.privateKey,
      TELECOM_API_URL: telecom.url,
      TELECOM_API_KEY: telecom.apiKey
    },
    close
  }
}

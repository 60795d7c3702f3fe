import pg from 'pg'
import type { Test } from 'tap'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import type { Sandbox } from '../../dev/sandbox/index.js'
import { buildTestApp, ensureTestDatabase, scopeWith, startTestSandbox, testSchemaUrl } from './app.js'
import { waitFor } from './processes.js'
import { login } from './tokens.js'

// Short request bounds, so that a placement's claim runs out in 6 s (3 x 1 s + 2 x 1 s + 2 x 0.5 s),
// and a reconciliation round every second.
export const FAST_RECOVERY = {
  DATABASE_QUERY_TIMEOUT_MS: '1000',
  BILLING_QUEUE_TIMEOUT_MS: '1000',
  CRM_QUEUE_TIMEOUT_MS: '500',
  ORDERS_RECONCILE_INTERVAL_S: '1'
}
const RECOVERY_BOUND_MS = 20_000

export const ORDER = { method: 'POST' as const, url: '/api/orders', payload: { productId: 1, billingCycle: 'monthly' } }

export interface StoredPlacement {
  id: string
  billingOrderId: number | null
  crmOrderId: string | null
  status: string
  placement: string | null
  /** Set while the placement waits for a retry with its key (ORDERS_PLACEMENT_RESUME_S). */
  resumableUntil: Date | null
}

/** Every order of the database (a test's own schema), with its placement step. */
export async function storedPlacements (databaseUrl: string): Promise<StoredPlacement[]> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const { rows } = await client.query<StoredPlacement>(
      `SELECT id, billing_order_id AS "billingOrderId", crm_order_id AS "crmOrderId", status, placement,
         placement_resumable_until AS "resumableUntil" FROM orders`)
    return rows
  } finally {
    await client.end()
  }
}

/**
 * What breaks the placement's invariant: a billing order that neither goes on (a portal order that
 * has its CRM order, naming it, and has not failed) nor is cancelled with its invoice; a portal order
 * with two billing orders; a CRM order of a cancelled billing order that the CRM did not cancel or
 * reject itself. Empty when it holds.
 */
export function placementViolations (sandbox: Sandbox, stored: StoredPlacement[]): string[] {
  const violations: string[] = []
  const invoices = sandbox.billing.invoices
  for (const billingOrder of sandbox.billing.orders) {
    const invoice = invoices.find((candidate) => candidate.id === billingOrder.invoiceid)
    const crmOrders = sandbox.crm.orders.filter((order) => order.BillingOrderId__c === String(billingOrder.id))
    if (billingOrder.status === 'Cancelled') {
      if (invoice?.status !== 'Cancelled') violations.push(`billing order ${billingOrder.id} is cancelled, its invoice ${invoice?.id} is ${invoice?.status}`)
      // Unless the CRM cancelled or rejected that order itself: its billing order went with it.
      const live = crmOrders.filter((order) => !['Cancelled', 'Rejected'].includes(String(order.Status)))
      if (live.length > 0) violations.push(`billing order ${billingOrder.id} is cancelled, yet CRM order ${String(live[0]?.Id)} names it`)
      continue
    }
    const portal = stored.filter((order) => order.billingOrderId === billingOrder.id)
    const [goesOn] = portal
    if (portal.length !== 1 || goesOn === undefined) violations.push(`billing order ${billingOrder.id} (${billingOrder.status}) has ${portal.length} portal orders`)
    else if (goesOn.crmOrderId === null || goesOn.status === 'Failed' || goesOn.placement !== 'placed') {
      violations.push(`billing order ${billingOrder.id} (${billingOrder.status}) is not cancelled, and its portal order is ${goesOn.status}, ${String(goesOn.placement)}, CRM ${String(goesOn.crmOrderId)}`)
    } else if (crmOrders.length !== 1 || crmOrders[0]?.Id !== goesOn.crmOrderId) {
      violations.push(`billing order ${billingOrder.id} has ${crmOrders.length} CRM orders`)
    }
    if (invoices.filter((candidate) => candidate.id === billingOrder.invoiceid).length !== 1) violations.push(`billing order ${billingOrder.id} has no single invoice`)
  }
  const unfinished = stored.filter((order) => order.placement !== null && !['placed', 'compensated'].includes(order.placement))
  for (const order of unfinished) {
    const kept = order.resumableUntil === null ? '' : ` (kept for a retry with its key until ${order.resumableUntil.toISOString()})`
    violations.push(`portal order ${order.id} is still ${order.placement}${kept}`)
  }
  return violations
}

/** Waits until every placement is finished or undone, and the invariant holds. */
export function recovered (sandbox: Sandbox, databaseUrl: string, timeoutMs = RECOVERY_BOUND_MS): Promise<void> {
  let violations: string[] = []
  return waitFor('every placement finished or undone', async () => {
    violations = placementViolations(sandbox, await storedPlacements(databaseUrl))
    return violations.length === 0
  }, timeoutMs, () => `still: ${violations.slice(0, 10).join('; ')}${violations.length > 10 ? ` and ${violations.length - 10} more` : ''}`)
}

/** A reconciliation round now, as the next interval brings one: the leases of the last round are given up first. */
export async function nextRound (app: FastifyInstance): Promise<void> {
  await app.pg.query('DELETE FROM reconciliation_leases')
  await scopeWith(app, 'orderReconciliation').orderReconciliation.runOnce()
}

/** A sandbox, a database schema and an app of the test's own with FAST_RECOVERY, and Jane signed in. */
export async function placementTestApp (t: Test, overrides: Record<string, string> = {}) {
  await ensureTestDatabase()
  const sandbox = await startTestSandbox(t)
  const databaseUrl = await testSchemaUrl(t)
  const app = await buildTestApp(t, { ...FAST_RECOVERY, DATABASE_URL: databaseUrl, ...overrides }, sandbox)
  const token = await login(app)
  return { sandbox, databaseUrl, app, token, recovered: () => recovered(sandbox, databaseUrl) }
}

/** Sends `request` again and again until it is not told 409 (its key's placement held, or an earlier create that may still land). */
export async function untilNotInUse (app: FastifyInstance, request: InjectOptions, timeoutMs = 20_000): Promise<LightMyRequestResponse> {
  let answer: LightMyRequestResponse | undefined
  await waitFor('an answer other than 409', async () => {
    answer = await app.inject(request)
    return answer.statusCode !== 409
  }, timeoutMs)
  return answer!
}

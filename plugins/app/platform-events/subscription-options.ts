import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import type { PlatformEventMessage } from '../../../integrations/crm/bayeux-protocol.js'
import type { CrmClient } from '../../../integrations/crm/client.js'
import type { ReplayPositions } from './replay-positions.js'

/** What the platform-event subscription is given: its lease, its stream, where its events go. */
export interface EventSubscriptionOptions {
  enabled: boolean
  replay: 'ALL' | 'LATEST' | undefined
  redis: Redis
  /** The replay position's copy that outlives Redis. */
  positions: Pick<ReplayPositions, 'read' | 'advance' | 'forget'>
  keyPrefix: string
  crm: CrmClient
  apiVersion: string
  leaseTtlMs: number
  connectTimeoutMarginMs: number
  /** Durably hands one event over (stored order, queued job); the replay position moves past it only after. */
  handOff: (event: PlatformEventMessage) => Promise<void>
  /** Events of a batch handed off at once (each reads its order from the CRM). */
  handOffConcurrency: number
  /** This instance, the holder, subscribed again as another instance (or itself) asked. */
  onResubscribe?: () => void
  log: FastifyBaseLogger
  backoff?: { initialMs?: number, maxMs?: number }
}

import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { classifyFailure, FAILURE_KINDS, type FailureKind } from '../../../lib/errors.js'
import type { MonitoringSource } from '../monitoring/index.js'

/** The CRM status rounds as every instance sees them: how many in a row could not ask the CRM, and the last failure. */
export interface CrmRoundsReport {
  failedInRow: number
  lastFailure: FailureKind | null
  /** ISO 8601; null when no round has failed since the last one that asked. */
  lastFailedAt: string | null
}

export interface CrmStatusRoundsOptions {
  /** Should fail fast while Redis is unreachable. */
  redis: Redis
  /** The hash that holds the run for every instance (redis-keys.ts). */
  key: string
  log: FastifyBaseLogger
}

const count = (value: string | undefined) => value !== undefined && /^\d+$/.test(value) ? Number(value) : 0

/**
 * The outcome of each round of the reconciliation's CRM status task (contract §10a): a round that
 * could not ask the CRM is counted here (this instance's rounds) and lengthens the run of failed
 * rounds, kept in Redis because the rounds move from instance to instance with their lease; a round
 * that asked, or had nothing to ask, ends the run. Redis away, the run is not kept (the cache
 * check fails then, and says so), but the count is.
 */
export class CrmStatusRounds {
  readonly #options: CrmStatusRoundsOptions
  #failed = 0
  /** Whether the last outcome was kept: a Redis outage is said once, and its end once. */
  #kept = true

  constructor (options: CrmStatusRoundsOptions) {
    this.#options = options
  }

  /** Rounds of this instance that could not ask the CRM, since start. */
  get failed (): number {
    return this.#failed
  }

  /** The round asked the CRM, or had nothing to ask: not blind. */
  async asked (): Promise<void> {
    await this.#options.redis.hset(this.#options.key, 'failedInRow', 0, 'lastFailure', '', 'lastFailedAt', '')
      .then(() => this.#keptAgain(), (error: unknown) => this.#notKept(error))
  }

  /** The round could not ask the CRM: `error` is what the CRM call threw. */
  async failedToAsk (error: unknown): Promise<void> {
    this.#failed++
    const { redis, key } = this.#options
    await redis.multi()
      .hincrby(key, 'failedInRow', 1)
      .hset(key, 'lastFailure', classifyFailure(error), 'lastFailedAt', new Date().toISOString())
      .exec()
      .then(() => this.#keptAgain(), (failure: unknown) => this.#notKept(failure))
  }

  async read (): Promise<CrmRoundsReport> {
    const fields = await this.#options.redis.hgetall(this.#options.key)
    const lastFailure = FAILURE_KINDS.find((known) => known === fields.lastFailure) ?? null
    return {
      failedInRow: count(fields.failedInRow),
      lastFailure,
      lastFailedAt: fields.lastFailedAt === '' ? null : (fields.lastFailedAt ?? null)
    }
  }

  #notKept (error: unknown): void {
    if (!this.#kept) return
    this.#kept = false
    this.#options.log.warn(
      { failure: classifyFailure(error) },
      'the outcomes of the CRM status rounds cannot be kept in Redis: their run of failures is not counted until it answers'
    )
  }

  #keptAgain (): void {
    if (this.#kept) return
    this.#kept = true
    this.#options.log.info('the outcomes of the CRM status rounds are kept in Redis again')
  }
}

/** The run of rounds that could not ask the CRM, judged: three in a row warn (reconciliation_crm_failed_rounds). */
export function crmRoundsPart (rounds: CrmStatusRounds): MonitoringSource<CrmRoundsReport> {
  return {
    description: 'Redis (which keeps the reconciliation\'s run of failed CRM status rounds)',
    read: () => rounds.read(),
    measures: {
      reconciliation_crm_failed_rounds: ({ failedInRow, lastFailure }) => ({
        value: failedInRow,
        ...(lastFailure !== null && failedInRow > 0 && { note: `the CRM status query failed (${lastFailure}): orders in Pending Review are not judged until it answers` })
      })
    },
    metrics: [
      {
        name: 'portal_bff_reconciliation_crm_failed_rounds_in_row',
        help: 'Rounds of the order reconciliation in a row, on any instance, that could not ask the CRM the Status of the orders in Pending Review; 0 once a round asks it',
        type: 'gauge',
        samples: ({ failedInRow }) => [{ value: failedInRow }]
      }
    ]
  }
}

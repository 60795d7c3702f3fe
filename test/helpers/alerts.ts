import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { checkLevel, type RuleExpectation } from '../../dev/scripts/promtool.js'
import type { MeasureName } from '../../plugins/app/monitoring/thresholds.js'
import type { Level } from '../../plugins/app/monitoring/levels.js'
import { skipWithout } from './packages.js'
import { waitFor } from './processes.js'

/**
 * A /metrics scrape of what the monitoring reads now. A scrape waits 150 ms for a fresh reading and
 * otherwise serves each part as last read: a test that just changed something reads fresh first.
 */
export async function scrapeFresh (app: FastifyInstance): Promise<string> {
  await app.monitoring.snapshot()
  return (await app.inject('/metrics')).body
}

/**
 * A /metrics scrape holding every series `expected` names: a part whose very first read outlasts
 * the monitoring's read timeout (a busy machine's cold reads can) has no value to serve until one
 * read answers.
 */
export async function scrapeHolding (app: FastifyInstance, expected: RegExp[]) {
  let response = await app.inject('/metrics')
  await waitFor(`a scrape holding ${expected.join(', ')}`, async () => {
    response = await app.inject('/metrics')
    return expected.every((pattern) => pattern.test(response.body))
  }, 20_000)
  return response
}

/**
 * A measure's level, read from /health/alerts and from the shipped Prometheus rules fed the
 * service's /metrics: both must say `level` (the rules `rules.level` when given).
 */
export async function expectLevel (t: Test, app: FastifyInstance, measure: MeasureName, level: Level, why: string, rules: RuleExpectation = {}) {
  const { alert, promtool } = await checkLevel((url) => app.inject(url), measure, level, rules)
  t.equal(alert.level, level, `${why}: ${measure} is ${level} in /health/alerts (value ${alert.value})`)
  t.equal(alert.crossed, level === 'ok' ? null : level, 'crossed names the threshold passed')
  await t.test(`${why}: the Prometheus rule fires the ${rules.level ?? level} alerts${rules.volume === undefined ? '' : ` at ${rules.volume} times the volume`}`, { skip: skipWithout(['promtool']) }, async (t) => {
    t.ok(promtool?.agrees, 'promtool test rules passes on the scrape', { output: promtool?.output })
  })
  return alert
}

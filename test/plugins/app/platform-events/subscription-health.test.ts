import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox, testKeyPrefix } from '../../../helpers/app.js'
import { scrapeFresh } from '../../../helpers/alerts.js'
import { waitFor } from '../../../helpers/processes.js'
import { ORDER_PROVISION_CHANNEL } from '../../../../plugins/app/platform-events/subscription.js'
import { HOLDER_STATES } from '../../../../plugins/app/platform-events/holder-state.js'

// What /health/queues and /metrics say of the platform-event subscription itself, which the
// subscription alerts (deploy/monitoring/prometheus/alerts.yml) are judged on.

interface EventsReport { health: string, state: string, replaySupported: boolean | null, replayFallbacks: number, holder: { state: string, heldHere: boolean } | null }

async function events (app: FastifyInstance): Promise<EventsReport> {
  return ((await app.inject('/health/queues')).json() as { events: EventsReport }).events
}

// Only the subscription's series: a failure shows them, not the whole scrape.
async function metrics (app: FastifyInstance): Promise<string> {
  return (await scrapeFresh(app)).split('\n').filter((line) => line.startsWith('portal_bff_event_')).join('\n')
}

t.test('a CRM that grants no replay extension: connected, but degraded in /health/queues and in /metrics', async (t) => {
  const sandbox = await startTestSandbox(t, { crm: { streaming: { replayExtension: false } } })
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true' }, sandbox)
  await waitFor('the subscription', async () => (await events(app)).holder?.state === 'connected')
  t.match(await events(app), { health: 'degraded', state: 'connected', replaySupported: false, replayFallbacks: 0 })
  const text = await metrics(app)
  t.match(text, /^portal_bff_event_subscriber_replay_supported 0$/m, 'the rule PortalBffEventReplayUnsupported reads 0')
  t.match(text, /^portal_bff_event_subscription_holder_state\{state="connected"\} 1$/m)
})

t.test('a CRM that grants it: healthy; the holder state has every label, at 0 but the current one', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true' })
  await waitFor('the subscription', async () => (await events(app)).holder?.state === 'connected')
  t.match(await events(app), { health: 'healthy', state: 'connected', replaySupported: true })
  const text = await metrics(app)
  t.match(text, /^portal_bff_event_subscriber_replay_supported 1$/m)
  for (const state of HOLDER_STATES.filter((state) => state !== 'connected')) {
    t.match(text, new RegExp(`^portal_bff_event_subscription_holder_state\\{state="${state}"\\} 0$`, 'm'), `${state}: 0`)
  }
  t.match(text, /^portal_bff_event_subscription_holder_state_age_seconds 0$/m, 'this instance holds it: its own word, of now')
  t.match(text, /^portal_bff_event_subscriber_replay_fallbacks_total 0$/m, 'the fallback counter starts at 0, so increase() sees the first')
})

t.test('no instance holds the lease: unhealthy, and the holder state says none', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true' }, sandbox)
  await waitFor('the subscription', async () => (await events(app)).holder?.state === 'connected')
  await app.platformEvents.subscription.stop()
  t.match(await events(app), { health: 'unhealthy', holder: null })
  t.match(await metrics(app), /^portal_bff_event_subscription_holder_state\{state="none"\} 1$/m)
})

t.test('events disabled: said so in /health/queues, /auth/health-check and /metrics, never healthy nor invisible', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'false' })
  t.match(await events(app), { health: 'disabled', state: 'disabled' })
  const check = await app.inject('/auth/health-check')
  t.equal(check.statusCode, 200, 'a disabled subscription fails no integration check')
  t.match(check.json(), { status: 'ok', checks: { events: { status: 'disabled', latencyMs: 0 } } })
  const text = await metrics(app)
  t.match(text, /^portal_bff_event_subscription_holder_state\{state="disabled"\} 1$/m, 'the holder state is exported, as disabled')
  for (const state of HOLDER_STATES.filter((state) => state !== 'disabled')) {
    t.match(text, new RegExp(`^portal_bff_event_subscription_holder_state\\{state="${state}"\\} 0$`, 'm'), `${state}: 0`)
  }
  t.match(text, /^portal_bff_event_subscription_holder_state_age_seconds 0$/m)
  t.match(text, /^portal_bff_event_subscriber_state\{state="disabled"\} 1$/m)
})

t.test('a holder that stops reporting: its state goes stale after two renewals, then unknown past a takeover\'s time, with its age', async (t) => {
  // Another instance holds the lease (written here as it writes it) and reports less and less often.
  const prefix = testKeyPrefix()
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true', CRM_EVENTS_LEASE_TTL_MS: '6000', REDIS_KEY_PREFIX: prefix })
  const other = 'another-host:1:0000'
  const report = async (ageMs: number, state = 'connected') => {
    const reportedAt = new Date(Date.now() - ageMs).toISOString()
    await app.redis.set(`${prefix}crm:pe:lease:${ORDER_PROVISION_CHANNEL}`, other, 'PX', 60_000)
    await app.redis.set(`${prefix}crm:pe:state:${ORDER_PROVISION_CHANNEL}`, JSON.stringify({ state, instance: other, reportedAt, lastEventAt: null, replayId: null, received: 0, reconnects: 0, dropped: 0, replaySupported: true, lastError: null, replayFallbacks: 0 }), 'PX', 60_000)
  }
  // This instance may have taken the lease before the other's was written: it lets it go at its next
  // renewal, and until then its own reports overwrite the other's, which is written again until seen.
  await waitFor('the other instance seen as the holder', async () => {
    await report(0)
    return (await events(app)).holder?.heldHere === false
  })
  const seen = async (ageMs: number, state?: string) => {
    await report(ageMs, state)
    const text = await metrics(app)
    return {
      state: /^portal_bff_event_subscription_holder_state\{state="([a-z]+)"\} 1$/m.exec(text)?.[1],
      age: Number(/^portal_bff_event_subscription_holder_state_age_seconds (\S+)$/m.exec(text)?.[1])
    }
  }
  // A scrape may reuse the snapshot of one a moment before: each report is written again until a
  // scrape reads it, and judged then.
  const seenAs = async (expected: string, ageMs: number, state?: string) => {
    let last = await seen(ageMs, state)
    await waitFor(`the holder state ${expected}`, async () => {
      last = await seen(ageMs, state)
      return last.state === expected
    }, 10_000).catch(() => {})
    return last
  }
  // Renewals every 1.5 s (a quarter of the lease): stale past 3 s, unknown past 7.5 s.
  t.match(await seenAs('connected', 1000), { state: 'connected' }, 'a fresh report: the holder\'s own state')
  t.match(await seenAs('failed', 1000, 'failed'), { state: 'failed' })
  const stale = await seenAs('stale', 5000)
  t.equal(stale.state, 'stale', 'older than two renewals: stale')
  t.ok(stale.age >= 5 && stale.age < 10, `with its age (${stale.age} s)`)
  const unknown = await seenAs('unknown', 20_000)
  t.equal(unknown.state, 'unknown', 'older than a takeover takes: unknown')
  t.ok(unknown.age >= 20, `with its age (${unknown.age} s)`)
})

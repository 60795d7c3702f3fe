import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, startTestSandbox } from '../../../helpers/app.js'
import { waitFor } from '../../../helpers/processes.js'

// What /health/queues and /metrics say of the platform-event subscription itself, which the
// subscription alerts (deploy/monitoring/prometheus/alerts.yml) are judged on.

interface EventsReport { health: string, state: string, replaySupported: boolean | null, replayFallbacks: number, holder: { state: string } | null }

async function events (app: FastifyInstance): Promise<EventsReport> {
  return ((await app.inject('/health/queues')).json() as { events: EventsReport }).events
}

async function metrics (app: FastifyInstance): Promise<string> {
  return (await app.inject('/metrics')).body
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
  for (const state of ['none', 'standby', 'connecting', 'failed', 'disabled']) {
    t.match(text, new RegExp(`^portal_bff_event_subscription_holder_state\\{state="${state}"\\} 0$`, 'm'), `${state}: 0`)
  }
  t.match(text, /^portal_bff_event_subscriber_replay_fallbacks_total 0$/m, 'the fallback counter starts at 0, so increase() sees the first')
})

t.test('no instance holds the lease: unhealthy, and the holder state says none', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true' }, sandbox)
  await waitFor('the subscription', async () => (await events(app)).holder?.state === 'connected')
  await app.eventSubscription.stop()
  t.match(await events(app), { health: 'unhealthy', holder: null })
  t.match(await metrics(app), /^portal_bff_event_subscription_holder_state\{state="none"\} 1$/m)
})

t.test('events disabled: nothing to judge, and no holder metric to page on', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'false' })
  t.match(await events(app), { health: 'healthy', state: 'disabled' })
  t.notMatch(await metrics(app), /portal_bff_event_subscription_holder_state/)
})

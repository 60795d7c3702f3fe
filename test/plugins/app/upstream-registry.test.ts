import t from 'tap'
import { thresholdRules } from '../../../dev/scripts/alert-rules.js'
import { defineUpstream, requestQueue } from '../../../integrations/descriptor.js'
import { UPSTREAMS } from '../../../integrations/registry.js'
import { Upstream, type UpstreamOptions } from '../../../integrations/upstream.js'
import { FAILURE_CLASSES } from '../../../lib/errors.js'
import { Secret, Url } from '../../../lib/setting-schemas.js'
import { thresholdsOf } from '../../../plugins/app/monitoring/thresholds.js'
import { upstreamNamed, type UpstreamParts } from '../../../plugins/app/upstreams/index.js'
import { ConfigError, loadConfig } from '../../../settings.js'
import { buildTestApp, testEnv } from '../../helpers/app.js'
import { json, stubServer } from '../../helpers/http-stub.js'

/** The client of an upstream the product does not have: an address checker that answers `GET /status`. */
class PostalClient {
  readonly #upstream: Upstream

  constructor (private readonly options: UpstreamOptions & { url: string, token: string }) {
    this.#upstream = new Upstream('postal', options, [options.token])
  }

  async health (signal: AbortSignal): Promise<void> {
    await this.#upstream.call('status', async (deadline) => {
      const response = await this.#upstream.send({ url: `${this.options.url}/status`, method: 'GET', headers: { authorization: `Bearer ${this.options.token}` }, signal: deadline })
      if (response.status !== 200) throw this.#upstream.failure('http_5xx', `status: HTTP ${response.status}`)
    }, signal)
  }

  close (): Promise<void> {
    return this.#upstream.close()
  }
}

/** The upstream as the registry takes it: its descriptor alone. */
const postal = defineUpstream({
  name: 'postal',
  title: 'postal',
  description: 'address checker',
  settings: {
    POSTAL_API_URL: Url('address checker base URL'),
    POSTAL_API_TOKEN: Secret('address checker API token')
  },
  client: (settings, options) => new PostalClient({ ...options, url: settings.POSTAL_API_URL, token: settings.POSTAL_API_TOKEN }),
  health: (client, signal) => client.health(signal)
})

const registry = [...UPSTREAMS, postal]

/** Another, whose calls wait in a request queue of their own: its descriptor alone again. */
const geocoder = defineUpstream({
  name: 'geocoder',
  title: 'geocoder',
  description: 'geocoding service',
  settings: {
    GEOCODER_API_URL: Url('geocoding service base URL'),
    GEOCODER_API_TOKEN: Secret('geocoding service API token')
  },
  queue: requestQueue({
    concurrency: { setting: 'GEOCODER_QUEUE_CONCURRENCY', maximum: 20, default: 3, description: 'geocoder requests in flight at once' },
    timeoutMs: { setting: 'GEOCODER_QUEUE_TIMEOUT_MS', default: 4000, description: 'deadline of one geocoder request, waiting included' },
    maxSize: { setting: 'GEOCODER_QUEUE_MAX_SIZE', default: 30, description: 'geocoder requests that may wait' },
    limits: {
      queueSize: { warning: 4, critical: 12, priority: { warning: 'P4', critical: 'P3' } },
      failedRequests: { warning: 1, critical: 3, priority: { warning: 'P4', critical: 'P3' } }
    }
  }),
  client: (settings, options) => new PostalClient({ ...options, url: settings.GEOCODER_API_URL, token: settings.GEOCODER_API_TOKEN }),
  health: (client, signal) => client.health(signal)
})

const queuedRegistry = [...UPSTREAMS, geocoder]

t.test('an upstream registered by its descriptor alone is read from the settings, checked, and measured', async (t) => {
  let up = true
  const seen: Array<{ path: string | undefined, authorization: string | undefined }> = []
  const url = await stubServer(t, (request) => {
    seen.push({ path: request.url, authorization: request.headers.authorization })
    return up ? json(200, { status: 'ok' }) : json(503, { status: 'down' })
  })
  const app = await buildTestApp(t, { POSTAL_API_URL: url, POSTAL_API_TOKEN: 'postal-token', INTEGRATION_CHECK_CACHE_MS: '0' }, undefined, { upstreams: registry })

  t.same(app.config.upstreamSettings.postal, { POSTAL_API_URL: url, POSTAL_API_TOKEN: 'postal-token' }, 'its settings group, read from the environment')
  t.ok(upstreamNamed(app.upstreams, 'postal')?.client instanceof PostalClient, 'its client, under its name')

  const zeroed = (await app.inject('/metrics')).body
  for (const outcome of ['ok', ...FAILURE_CLASSES]) {
    t.match(zeroed, new RegExp(`^portal_bff_upstream_request_duration_seconds_count\\{upstream="postal",outcome="${outcome}"\\} 0$`, 'm'), `its ${outcome} series, at 0 from the start`)
  }

  const healthy = await app.inject('/auth/health-check')
  t.equal(healthy.statusCode, 200)
  const checks = healthy.json().checks as Record<string, { status: string, error?: string }>
  t.same(Object.keys(checks), ['database', 'billing', 'crm', 'telecom', 'postal', 'events'], 'a check of its own, after the product\'s upstreams')
  t.equal(checks.postal?.status, 'ok')
  t.same(seen, [{ path: '/status', authorization: 'Bearer postal-token' }], 'its health probe, with its credentials')
  t.match((await app.inject('/metrics')).body, /^portal_bff_upstream_request_duration_seconds_count\{upstream="postal",outcome="ok"\} 1$/m, 'the probe\'s call, measured')

  up = false
  const failing = await app.inject('/auth/health-check')
  t.equal(failing.statusCode, 503, 'its failure degrades the integration health')
  t.match(failing.json().checks.postal, { status: 'fail', error: 'http_5xx' })

  const document = (await app.inject('/docs/json')).json()
  t.ok(document.components.schemas.IntegrationHealthReport.properties.checks.properties.postal, 'the API document names its check')
  t.equal(document.paths['/auth/health-check'].get.summary, 'Integration health: database, billing system, CRM, telecom provider and address checker')
})

t.test('its settings group is given whole or not at all, and production requires it', async (t) => {
  const refusal = (env: Record<string, string>) => {
    try {
      loadConfig(env, registry)
      return undefined
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      return error.message
    }
  }
  t.match(refusal(testEnv({ POSTAL_API_URL: 'http://127.0.0.1:1' })), /Invalid setting POSTAL_API_TOKEN: required: the other postal settings are given/)
  t.match(refusal({ NODE_ENV: 'production' }), /Invalid setting POSTAL_API_URL: required in production \(a URL: address checker base URL\)/)
  const { config } = loadConfig(testEnv(), registry)
  t.same(config.missingUpstreamSettings.filter((name) => name.startsWith('POSTAL_')), ['POSTAL_API_URL', 'POSTAL_API_TOKEN'], 'left out, it is missing, for the sandbox to fill in')
  t.notOk('postal' in config.upstreamSettings)
})

t.test('an upstream with a request queue, by its descriptor alone: its settings, queue reports, API document, metrics and alert rules', async (t) => {
  const { config } = loadConfig(testEnv({ GEOCODER_QUEUE_CONCURRENCY: '2' }), queuedRegistry)
  const settings = config as unknown as Record<string, unknown>
  t.same([settings.GEOCODER_QUEUE_CONCURRENCY, settings.GEOCODER_QUEUE_TIMEOUT_MS, settings.GEOCODER_QUEUE_MAX_SIZE], [2, 4000, 30], 'its queue settings, read with their defaults')
  t.throws(() => loadConfig(testEnv({ GEOCODER_QUEUE_CONCURRENCY: '21' }), queuedRegistry), /Invalid setting GEOCODER_QUEUE_CONCURRENCY: must be a whole number from 1 to 20/)

  let fail = false
  const url = await stubServer(t, () => fail ? json(503, { status: 'down' }) : json(200, { status: 'ok' }))
  const app = await buildTestApp(t, { GEOCODER_API_URL: url, GEOCODER_API_TOKEN: 'geo-token', GEOCODER_QUEUE_CONCURRENCY: '2' }, undefined, { upstreams: queuedRegistry })
  const { client, queue } = upstreamNamed(app.upstreams, 'geocoder') as Required<UpstreamParts<PostalClient>>
  t.same(queue.settings, { concurrency: 2, timeoutMs: 4000, maxSize: 30, windowMs: 300_000 }, 'upstreams.geocoder.queue, with its settings')

  await queue.run((deadline) => client.health(deadline.signal))
  fail = true
  for (let failure = 0; failure < 2; failure++) await t.rejects(queue.run((deadline) => client.health(deadline.signal)))

  const report = (await app.inject('/health/queues')).json()
  t.match(report.geocoder, { health: 'degraded', metrics: { totalRequests: 3, completedRequests: 1, failedRequests: 2 } }, '/health/queues: its report, judged by its own limits (2 failures, past its warning of 1)')
  t.same(Object.keys(report.geocoder), ['health', 'metrics'])
  t.match(report.billing, { health: 'healthy' }, 'beside the product\'s queues, which keep their reports')
  t.ok(report.crm.dailyUsage, 'the CRM\'s with its daily usage')

  const detail = await app.inject('/health/queues/geocoder')
  t.equal(detail.statusCode, 200)
  t.match(detail.json(), {
    name: 'geocoder',
    health: 'degraded',
    level: 'warning',
    recentFailedRequests: 2,
    settings: { concurrency: 2, timeoutMs: 4000, maxSize: 30 },
    thresholds: { queueSize: { warning: 4, critical: 12 }, failedRequests: { warning: 1, critical: 3 } }
  }, '/health/queues/geocoder: its details and its own thresholds')
  t.same((await app.inject('/health/queues/billing')).json().thresholds, { queueSize: { warning: 10, critical: 50 }, failedRequests: { warning: 5, critical: 20 } }, 'billing keeps its own')

  const document = (await app.inject('/docs/json')).json()
  t.equal(document.paths['/health/queues/geocoder'].get.operationId, 'getGeocoderQueue', 'the API document: its route')
  t.same(document.components.schemas.QueuesReport.properties.geocoder, { $ref: '#/components/schemas/QueueReport' }, 'and its report in the queues report')
  t.ok(document.components.schemas.QueuesReport.required.includes('geocoder'))

  const metrics = (await app.inject('/metrics')).body
  t.match(metrics, /^portal_bff_queue_size\{queue="geocoder"\} 0$/m, '/metrics: its queue series')
  t.match(metrics, /^portal_bff_queue_requests_failed_total\{queue="geocoder"\} 2$/m)

  const alerts = (await app.inject('/health/alerts')).json().alerts as Array<{ measure: string, level: string, value: number | null }>
  t.match(alerts.find((alert) => alert.measure === 'geocoder_failed_requests'), { level: 'warning', value: 2 }, '/health/alerts judges its rows')
  t.match(alerts.find((alert) => alert.measure === 'geocoder_queue_size'), { level: 'ok', value: 0 })

  const rules = thresholdRules(undefined, thresholdsOf(queuedRegistry)).filter((rule) => rule.labels.dependency === 'geocoder')
  t.same(rules.map((rule) => [rule.alert, rule.labels.severity, rule.priority]), [
    ['PortalBffGeocoderQueueSize', 'warning', 'P4'],
    ['PortalBffGeocoderQueueSize', 'critical', 'P3'],
    ['PortalBffGeocoderFailedRequests', 'warning', 'P4'],
    ['PortalBffGeocoderFailedRequests', 'critical', 'P3']
  ], 'the alert rules: a warning and a critical rule of each of its rows')
  t.match(rules[1]?.expr, 'sum without (queue) (portal_bff_queue_size{queue="geocoder"}) > 12')
})

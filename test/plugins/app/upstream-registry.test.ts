import t from 'tap'
import { defineUpstream } from '../../../integrations/descriptor.js'
import { UPSTREAMS } from '../../../integrations/registry.js'
import { Upstream, type UpstreamOptions } from '../../../integrations/upstream.js'
import { FAILURE_CLASSES } from '../../../lib/errors.js'
import { Secret, Url } from '../../../lib/setting-schemas.js'
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

t.test('an upstream registered by its descriptor alone is read from the settings, checked, and measured', async (t) => {
  let up = true
  const seen: Array<{ path: string | undefined, authorization: string | undefined }> = []
  const url = await stubServer(t, (request) => {
    seen.push({ path: request.url, authorization: request.headers.authorization })
    return up ? json(200, { status: 'ok' }) : json(503, { status: 'down' })
  })
  const app = await buildTestApp(t, { POSTAL_API_URL: url, POSTAL_API_TOKEN: 'postal-token', INTEGRATION_CHECK_CACHE_MS: '0' }, undefined, { upstreams: registry })

  t.same(app.config.upstreamSettings.postal, { POSTAL_API_URL: url, POSTAL_API_TOKEN: 'postal-token' }, 'its settings group, read from the environment')
  t.ok((app as unknown as Record<string, unknown>).postal instanceof PostalClient, 'its client, under its name')

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

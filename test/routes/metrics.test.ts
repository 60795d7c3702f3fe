import t from 'tap'
import { buildTestApp, startTestSandbox } from '../helpers/app.js'
import { PrivateRedis, buildTestAppOnPrivateRedis } from '../helpers/private-redis.js'
import { scrapeHolding } from '../helpers/alerts.js'
import { parseExposition, promtool, typeOf } from '../../dev/scripts/promtool.js'
import { before } from '../helpers/before.js'
import { skipWithout } from '../helpers/packages.js'
import { waitFor } from '../helpers/processes.js'
import { THRESHOLDS } from '../../plugins/app/monitoring/thresholds.js'
import { acceptsOpenMetrics } from '../../plugins/app/monitoring/metrics.js'
import type { PrometheusSource } from '../../plugins/app/monitoring/threshold-row.js'

/** The series a row's rule reads. */
function seriesOf (source: PrometheusSource): string[] {
  switch (source.kind) {
    case 'gauge': case 'failing': return [source.metric]
    case 'quotient': return [source.numerator, source.denominator]
    case 'ratio': return [source.metric]
    case 'quantile': return [`${source.histogram}_bucket`]
  }
}

t.test('/metrics is Prometheus text carrying every measure and the process metrics', async (t) => {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const admin = redis.client(t)
  await admin.config('SET', 'maxmemory', String(64 * 1024 * 1024))
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { REDIS_URL: redis.url }, sandbox)

  // One of everything, so that every series has a sample.
  await app.upstreams.crm.queue.run((deadline) => app.upstreams.crm.client.getLimits(deadline))
  await app.upstreams.telecom.client.health(AbortSignal.timeout(5000))
  await app.upstreams.billing.client.health(AbortSignal.timeout(5000))
  await app.servicesCache.getOrLoad('client', 'metrics-test', async () => ({}))
  await app.pg.query('SELECT 1')
  await app.inject('/no-such-route')

  const response = await scrapeHolding(app, [/^portal_bff_health_check_up\{check="database"\} 1$/m, /^portal_bff_orders_pending_oldest_age_seconds /m])
  t.equal(response.statusCode, 200)
  t.match(response.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  const exposition = parseExposition(response.body)
  t.pass('parses as Prometheus text')
  const names = new Set(exposition.samples.map((sample) => sample.name))
  for (const row of THRESHOLDS) {
    for (const series of seriesOf(row.prometheus)) t.ok(names.has(series), `${row.measure}: ${series}`)
  }
  for (const name of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) {
    t.ok(names.has(name), `default process metric ${name}`)
  }
  for (const name of names) t.ok(typeOf(exposition, name), `${name} has a TYPE`)
  t.match(response.body, /^portal_bff_health_check_up\{check="database"\} 1$/m)
  t.match(response.body, /^portal_bff_cache_memory_max_bytes 67108864$/m, 'Redis maxmemory, as set')
  t.match(response.body, /^portal_bff_db_pool_connections_max 10$/m)

  await t.test('promtool check metrics finds no problem with the service\'s metrics', { skip: skipWithout(['promtool']) }, async (t) => {
    // prom-client's own default metrics have one known lint finding (nodejs_active_handles_total is a gauge).
    const lint = await promtool(['check', 'metrics'], { input: response.body })
    t.notMatch(lint.output, /portal_bff_/, 'no finding names a portal_bff_ series', { output: lint.output })
  })
})

t.test('HTTP metrics: route patterns, no probes, and one registry per app instance', async (t) => {
  const sandbox = await startTestSandbox(t)
  const first = await buildTestApp(t, {}, sandbox)
  const second = await buildTestApp(t, {}, sandbox)
  t.equal((await first.inject('/api/invoices/12345')).statusCode, 401)
  for (let i = 0; i < 3; i++) await first.inject('/health')
  await first.inject('/health/alerts')
  await first.inject('/status')

  const text = (await first.inject('/metrics')).body
  t.match(text, /^portal_bff_http_request_duration_seconds_count\{route="\/api\/invoices\/:id",method="GET",status_class="4xx"\} 1$/m, 'labelled by the route pattern, not the path')
  t.notMatch(text, /route="\/health/, 'probes are not counted')
  t.notMatch(text, /route="\/status/, 'nor is the status page')
  t.match((await second.inject('/metrics')).body, /^portal_bff_http_request_duration_seconds_count\{route="\/api\/invoices\/:id",method="GET",status_class="4xx"\} 0$/m, 'the other instance has its own registry')
})

// A scrape that waited on the hung Redis would answer only once its command or check timed out:
// every scrape is asked for before that timeout, far above what a scrape waits (150 ms at most).
const HUNG_REDIS_TIMEOUT_MS = 5000

t.test('with Redis hung, /metrics answers without waiting on it, serving what does not answer as last read, and soon says the cache check fails', async (t) => {
  const { redis, app } = await buildTestAppOnPrivateRedis(t, { HEALTH_CHECK_TIMEOUT_MS: String(HUNG_REDIS_TIMEOUT_MS), REDIS_COMMAND_TIMEOUT_MS: String(HUNG_REDIS_TIMEOUT_MS) })
  t.match((await app.inject('/metrics')).body, /^portal_bff_health_check_up\{check="cache"\} 1$/m, 'the cache up before')
  redis.hang()
  const told: Array<string | undefined> = []
  let late = 0
  await waitFor('the failing cache check in /metrics', async () => {
    const body = (await before(HUNG_REDIS_TIMEOUT_MS, app.inject('/metrics')))?.body
    if (body === undefined) late++
    const cache = body === undefined ? undefined : /^portal_bff_health_check_up\{check="cache"\} (\d)$/m.exec(body)?.[1]
    told.push(cache)
    return cache === '0'
  }, 4 * HUNG_REDIS_TIMEOUT_MS)
  redis.resume()
  t.pass('the failing cache check reaches /metrics, for the core-status alert to fire')
  t.equal(late, 0, 'every scrape answered before the hung command could time out: none waited on Redis')
  t.equal(told[0], '1', 'the first scrape after the hang served the cache check as last read')
  t.match((await app.inject('/metrics')).body, /^portal_bff_monitoring_reading_age_seconds\{part="core"\} /m, 'each part\'s age is told')
})

t.test('every known label set is there at 0 before its first event, so that rate() sees the first failure', async (t) => {
  const app = await buildTestApp(t)
  const text = (await app.inject('/metrics')).body
  t.match(text, /^portal_bff_upstream_request_duration_seconds_count\{upstream="billing",outcome="http_5xx"\} 0$/m, 'an upstream failure class')
  t.match(text, /^portal_bff_upstream_request_duration_seconds_count\{upstream="telecom",outcome="timeout"\} 0$/m)
  t.match(text, /^portal_bff_db_query_duration_seconds_count\{outcome="error"\} 0$/m, 'a failed query')
  t.match(text, /^portal_bff_http_request_duration_seconds_count\{route="\/api\/invoices",method="GET",status_class="5xx"\} 0$/m, 'a route\'s 5xx')
  t.notMatch(text, /route="\/(health|status|metrics)/, 'probes are not counted, not even at 0')
})

/** The names of an exposition's samples. */
function sampleNames (text: string): Set<string> {
  return new Set(text.split('\n').filter((line) => line !== '' && !line.startsWith('#')).map((line) => /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)![0]))
}

t.test('/metrics is OpenMetrics when the scraper asks for it first, as Prometheus does: the same series; Prometheus text otherwise', async (t) => {
  const app = await buildTestApp(t)
  await app.inject('/no-such-route')
  const asOpenMetrics = async () => await app.inject({ url: '/metrics', headers: { accept: 'application/openmetrics-text' } })
  const openMetrics = await asOpenMetrics()
  t.equal(openMetrics.statusCode, 200)
  t.equal(openMetrics.headers['content-type'], 'application/openmetrics-text; version=1.0.0; charset=utf-8')
  t.match(openMetrics.body, /\n# EOF\n$/, 'ended as OpenMetrics ends')
  t.match(openMetrics.body, /^# TYPE portal_bff_cache_reads counter$/m, 'a counter\'s family named without _total')
  t.match(openMetrics.body, /^portal_bff_cache_reads_total\{result="hit"\} /m, 'its samples with it')
  t.notMatch(openMetrics.body, / # \{/, 'no exemplar while tracing is off')

  const text = await app.inject('/metrics')
  t.match(text.headers['content-type'], /^text\/plain; version=0\.0\.4/, 'Prometheus text by default')
  t.match(text.body, /^# TYPE portal_bff_cache_reads_total counter$/m, 'its counters keep their names after an OpenMetrics scrape')
  const later = await asOpenMetrics()
  // Series only appear (a first garbage collection, say), but for the process's libuv requests and
  // handles, there only while one is: the text's are between the two scrapes'.
  const [before, names, after] = [openMetrics.body, text.body, later.body].map((body) => new Set([...sampleNames(body)].filter((name) => !name.startsWith('nodejs_active_')))) as [Set<string>, Set<string>, Set<string>]
  t.same([...before].filter((name) => !names.has(name)), [], 'every OpenMetrics series is in the text')
  t.same([...names].filter((name) => !after.has(name)), [], 'and every series of the text in OpenMetrics: Prometheus stores the same names either way')
  t.match(later.body, /^# TYPE portal_bff_cache_reads counter$/m, 'and OpenMetrics stays OpenMetrics')
})

t.test('the exposition is chosen as Prometheus\'s client libraries choose it: the first format by quality, in a version they speak', async (t) => {
  // Prometheus 2.42's own Accept header.
  t.ok(acceptsOpenMetrics('application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'))
  t.ok(acceptsOpenMetrics('application/openmetrics-text'))
  t.ok(acceptsOpenMetrics('text/plain;q=0.5, application/openmetrics-text; version=0.0.1'))
  t.notOk(acceptsOpenMetrics(undefined), 'no header: text')
  t.notOk(acceptsOpenMetrics('*/*'))
  t.notOk(acceptsOpenMetrics('text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.9'))
  t.notOk(acceptsOpenMetrics('application/openmetrics-text;version=2.0.0'), 'a version it does not write')
  t.notOk(acceptsOpenMetrics('application/openmetrics-text;q=0'), 'refused')
})

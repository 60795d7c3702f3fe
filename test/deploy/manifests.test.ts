import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import { projectRoot } from '../../lib/project-root.js'
import { SettingsSchema, loadConfig } from '../../settings.js'
import { HEARTBEAT_MS } from '../../plugins/app/sse-streams/index.js'
import { buildTestApp } from '../helpers/app.js'
import { HAPROXY_CONFIG, checkHaproxyConfig, haproxySettings } from '../helpers/haproxy.js'
import { skipWithout } from '../helpers/packages.js'
import { selfSignedCertificate } from '../helpers/tls.js'

const KUBERNETES = join(projectRoot, 'deploy', 'kubernetes', 'portal-bff.yaml')
const { PORT, SHUTDOWN_DELAY_MS, SHUTDOWN_TIMEOUT_MS } = SettingsSchema.properties
const DEFAULT_PORT = PORT.default as number
const DELAY_MS = SHUTDOWN_DELAY_MS.default as number
const TIMEOUT_MS = SHUTDOWN_TIMEOUT_MS.default as number

interface Probe { httpGet: { path: string, port: number | string }, periodSeconds?: number, timeoutSeconds?: number, failureThreshold?: number }
interface EnvVar { name: string, value?: string, valueFrom?: { secretKeyRef?: { name: string, key: string } } }
interface Container {
  name: string
  ports: Array<{ name?: string, containerPort: number }>
  env: EnvVar[]
  startupProbe: Probe
  livenessProbe: Probe
  readinessProbe: Probe
  lifecycle: { preStop: { exec: { command: string[] } } }
  resources: { requests: { memory: string, cpu: string } }
}
interface Manifest { kind: string, metadata: { name: string }, spec: Record<string, unknown> }
interface Deployment extends Manifest {
  spec: { replicas: number, selector: { matchLabels: Record<string, string> }, template: { metadata: { labels: Record<string, string> }, spec: { terminationGracePeriodSeconds: number, containers: Container[] } } }
}

const documents = parseAllDocuments(readFileSync(KUBERNETES, 'utf8'))
const manifests = documents.map((document) => document.toJS() as Manifest)
const ofKind = <T extends Manifest>(kind: string) => manifests.find((manifest) => manifest.kind === kind) as T | undefined

t.test('the Kubernetes manifests are YAML that reads without an error or a warning', async (t) => {
  t.ok(documents.length >= 3, 'a Deployment, a Service and a PodDisruptionBudget')
  for (const document of documents) {
    t.same([...document.errors, ...document.warnings].map((problem) => problem.message), [])
  }
})

t.test('Kubernetes: probes on routes of the service and its port, shutdown timing from its defaults', async (t) => {
  const deployment = ofKind<Deployment>('Deployment')
  if (deployment === undefined) throw new Error('no Deployment')
  const pod = deployment.spec.template.spec
  const [container] = pod.containers
  if (container === undefined) throw new Error('no container')
  t.same(deployment.spec.selector.matchLabels, deployment.spec.template.metadata.labels, 'the Deployment selects its own Pods')
  t.ok(deployment.spec.replicas >= 2, 'more than one replica to roll over')

  const app = await buildTestApp(t)
  const portOf = (port: number | string) => typeof port === 'number' ? port : container.ports.find((declared) => declared.name === port)?.containerPort
  for (const kind of ['startupProbe', 'livenessProbe', 'readinessProbe'] as const) {
    const { path, port } = container[kind].httpGet
    t.ok(app.hasRoute({ method: 'GET', url: path }), `${kind} ${path} is a route of the app`)
    t.equal(portOf(port), DEFAULT_PORT, `${kind} probes the service's port (${DEFAULT_PORT})`)
  }
  t.equal(container.livenessProbe.httpGet.path, '/health/live', 'liveness touches no dependency')
  t.equal(container.readinessProbe.httpGet.path, '/health/ready')
  const env = new Map(container.env.map((variable) => [variable.name, variable]))
  for (const name of ['PORT', 'SHUTDOWN_DELAY_MS', 'SHUTDOWN_TIMEOUT_MS']) t.notOk(env.has(name), `${name} keeps its default, which the timing below is judged on`)

  const [sleep, seconds, ...more] = container.lifecycle.preStop.exec.command
  t.equal(sleep, 'sleep')
  t.same(more, [])
  const preStopMs = Number(seconds) * 1000
  t.equal(preStopMs, DELAY_MS, `preStop sleeps SHUTDOWN_DELAY_MS (${DELAY_MS} ms)`)
  t.ok(pod.terminationGracePeriodSeconds * 1000 > preStopMs + TIMEOUT_MS,
    `terminationGracePeriodSeconds (${pod.terminationGracePeriodSeconds} s) exceeds preStop + SHUTDOWN_TIMEOUT_MS (${(preStopMs + TIMEOUT_MS) / 1000} s)`)
  const { periodSeconds = 10, failureThreshold = 3 } = container.readinessProbe
  t.ok(periodSeconds * failureThreshold * 1000 < DELAY_MS, 'a draining Pod is seen unready within SHUTDOWN_DELAY_MS')
  t.match(container.resources.requests, { memory: /^\d+Mi$/, cpu: /^\d+m$/ }, 'resource requests')

  for (const name of ['JWT_SECRET', 'DATABASE_URL', 'REDIS_URL', 'OPS_TOKEN']) {
    t.equal(env.get(name)?.valueFrom?.secretKeyRef?.key, name, `${name} comes from a Secret`)
  }
  for (const variable of container.env) {
    t.ok(variable.name in SettingsSchema.properties, `${variable.name} is a setting of the service`)
    if (/SECRET|KEY|TOKEN|PASSWORD|_URL$|CLIENT_ID|USERNAME/.test(variable.name) && !/^(BILLING_API|CRM_LOGIN|TELECOM_API)_URL$/.test(variable.name)) {
      t.ok(variable.valueFrom?.secretKeyRef !== undefined, `${variable.name} is not written in the manifest`)
    }
  }
  // What production requires, the manifest gives: the Secret's keys stand for valid values here.
  const placeholder = (name: string) => name === 'CRM_PRIVATE_KEY'
    ? '-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----'
    : name.endsWith('_URL') ? 'https://placeholder.example' : 'x'.repeat(32)
  const given = Object.fromEntries(container.env.map((variable) => [variable.name, variable.value ?? placeholder(variable.name)]))
  t.doesNotThrow(() => loadConfig({ NODE_ENV: 'production', ...given }), 'the service starts in production with these settings')

  const budget = ofKind<Manifest & { spec: { selector: { matchLabels: Record<string, string> }, maxUnavailable?: number, minAvailable?: number } }>('PodDisruptionBudget')
  t.same(budget?.spec.selector.matchLabels, deployment.spec.selector.matchLabels, 'the PodDisruptionBudget covers these Pods')
  t.ok(budget?.spec.maxUnavailable === 1 || (budget?.spec.minAvailable ?? 0) >= deployment.spec.replicas - 1, 'one Pod out at a time')
  const service = ofKind<Manifest & { spec: { selector: Record<string, string>, ports: Array<{ targetPort: number | string }> } }>('Service')
  t.same(service?.spec.selector, deployment.spec.template.metadata.labels, 'the Service selects these Pods')
  t.equal(portOf(service?.spec.ports[0]?.targetPort ?? ''), DEFAULT_PORT, 'the Service sends to the service\'s port')
})

t.test('HAProxy: haproxy -c accepts the configuration, reading the certificate HAPROXY_TLS_CERT names', { skip: skipWithout(['haproxy', 'openssl']) }, async (t) => {
  const { status, output } = checkHaproxyConfig(HAPROXY_CONFIG, selfSignedCertificate())
  t.equal(status, 0, `haproxy -c: ${output.trim()}`)
  const missing = checkHaproxyConfig(HAPROXY_CONFIG, { pemPath: '/nonexistent/elsewhere.pem', ca: '' })
  t.not(missing.status, 0, 'refused without its certificate')
  t.match(missing.output, '/nonexistent/elsewhere.pem', 'the one HAPROXY_TLS_CERT names')
})

t.test('HAProxy: TLS ends at the balancer, plain HTTP is redirected, the scheme and host are forwarded; its comments name the service\'s settings', async (t) => {
  const config = readFileSync(HAPROXY_CONFIG, 'utf8')
  const settings = haproxySettings(config)
  t.match(settings.tlsCertificate, /^"\$\{HAPROXY_TLS_CERT-\/\S+\.pem\}"$/, 'the certificate from HAPROXY_TLS_CERT, with a default path')
  t.ok(settings.redirectsToHttps, 'HTTP redirected to HTTPS')
  t.equal(settings.setHeaders['x-forwarded-proto'], 'https', 'X-Forwarded-Proto set, whatever a client sent')
  t.equal(settings.setHeaders['x-forwarded-host'], '%[req.hdr(host)]', 'X-Forwarded-Host: the Host the browser sent')
  t.notOk('host' in settings.setHeaders, 'the Host kept')
  const comments = config.split('\n').filter((line) => line.trim().startsWith('#')).join('\n')
  for (const setting of ['TRUST_PROXY', 'PUBLIC_ORIGIN', 'HAPROXY_TLS_CERT']) t.match(comments, setting, `the comments say what ${setting} is for`)
})

interface Ingress extends Manifest {
  metadata: { name: string, annotations: Record<string, string> }
  spec: {
    tls: Array<{ hosts: string[], secretName: string }>
    rules: Array<{ host: string, http: { paths: Array<{ path: string, backend: { service: { name: string, port: { name?: string, number?: number } } } }> } }>
  }
}

t.test('Kubernetes: the Ingress ends TLS with a Secret and redirects HTTP to the Service\'s routes; the Pods know the origin browsers use', async (t) => {
  const ingress = ofKind<Ingress>('Ingress')
  const service = ofKind<Manifest & { spec: { ports: Array<{ name: string }> } }>('Service')
  const container = ofKind<Deployment>('Deployment')?.spec.template.spec.containers[0]
  if (ingress === undefined || service === undefined || container === undefined) throw new Error('no Ingress, Service or container')
  const [tls] = ingress.spec.tls
  t.ok(tls?.secretName, 'the certificate from a Secret')
  t.equal(ingress.metadata.annotations['nginx.ingress.kubernetes.io/ssl-redirect'], 'true', 'HTTP redirected')
  const app = await buildTestApp(t)
  const env = new Map(container.env.map((variable) => [variable.name, variable.value]))
  for (const rule of ingress.spec.rules) {
    t.ok(tls?.hosts.includes(rule.host), `${rule.host} is served over TLS`)
    t.ok(env.get('PUBLIC_ORIGIN')?.split(',').includes(`https://${rule.host}`), `PUBLIC_ORIGIN names https://${rule.host}`)
    for (const { path, backend } of rule.http.paths) {
      t.equal(backend.service.name, service.metadata.name, `${path} goes to the Service`)
      t.ok(service.spec.ports.some((port) => port.name === backend.service.port.name), `on its port ${backend.service.port.name}`)
      t.ok(app.printRoutes({ commonPrefix: false }).includes(`${path}/`), `${path} is where routes of the service are`)
    }
  }
  t.ok(env.has('TRUST_PROXY'), 'TRUST_PROXY: the forwarded scheme, host and address are read')
})

t.test('HAProxy: the configuration checks readiness on the service\'s port within SHUTDOWN_DELAY_MS', async (t) => {
  const settings = haproxySettings(readFileSync(HAPROXY_CONFIG, 'utf8'))
  const app = await buildTestApp(t)
  t.equal(settings.checkMethod, 'GET')
  t.equal(settings.checkPath, '/health/ready')
  t.ok(app.hasRoute({ method: 'GET', url: settings.checkPath! }), 'the check is a route of the app')
  t.equal(settings.expectStatus, 200)
  t.equal(settings.balance, 'roundrobin')
  t.ok(settings.forwardFor, 'option forwardfor')
  t.ok(settings.servers.length >= 2 && settings.servers.every((server) => server.port === DEFAULT_PORT), `every server on the service's port (${DEFAULT_PORT})`)
  t.ok(settings.interMs * settings.fall < DELAY_MS / 2,
    `inter x fall (${settings.interMs * settings.fall} ms) leaves SHUTDOWN_DELAY_MS (${DELAY_MS} ms) room for a late check`)
  t.ok((settings.timeoutServerMs ?? 0) > HEARTBEAT_MS, 'an idle SSE stream outlives no server timeout: the heartbeat comes first')
})

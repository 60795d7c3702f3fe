import t from 'tap'
import { randomBytes } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, scopeWith, startTestSandbox } from '../../../helpers/app.js'
import { traceThisProcess, type ReceivedSpan } from '../../../helpers/otlp-receiver.js'
import { waitFor } from '../../../helpers/processes.js'
import { allActive, EVENTS_ON, eventsReport, STREAMING } from '../../../helpers/provisioning.js'
import { bearer, login } from '../../../helpers/tokens.js'

// A sampler that keeps no trace of its own: only what follows a placement its caller sampled is kept.
Object.assign(process.env, { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' })
const receiver = await traceThisProcess(t)

const traceparent = (sampled: boolean) => `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-${sampled ? '01' : '00'}`

async function place (app: FastifyInstance, token: string, sampled: boolean): Promise<{ crmOrderId: string }> {
  const response = await app.inject({ method: 'POST', url: '/api/orders', headers: { ...bearer(token), traceparent: traceparent(sampled) }, payload: { productId: 1, billingCycle: 'monthly' } })
  return response.json()
}

/** The span a span came from: its parent, or for the first span of a trace, the span it links to. */
function origin (span: ReceivedSpan): ReceivedSpan | undefined {
  const from = span.parentSpanId ?? span.links[0]?.spanId
  return receiver.spans.find((candidate) => candidate.spanId === from)
}

function wayBack (span: ReceivedSpan): ReceivedSpan[] {
  const way = [span]
  for (let next = origin(span); next !== undefined; next = origin(next)) way.push(next)
  return way
}

/** The way back from an order's telecom activation request, once every span of it is in. */
async function wayBackFromActivation (crmOrderId: string): Promise<ReceivedSpan[]> {
  const job = await receiver.span('the order\'s job', (span) => span.name === 'provisioning job' && span.attributes['crm.order_id'] === crmOrderId)
  const step = await receiver.span('its telecom activation', (span) => span.parentSpanId === job.spanId && span.name === 'provisioning step: telecom activation')
  const activation = await receiver.span('the activation request', (span) => span.name === 'POST' && origin(span)?.parentSpanId === step.spanId)
  await waitFor('the way back to the placement', async () => wayBack(activation).at(-1)?.name === 'POST /api/orders')
  return wayBack(activation)
}

t.test('an order sampled at placement is kept whole: from the telecom activation back to the placement request by parents and links alone; one left out is left out whole', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected', 10_000)
  const token = await login(app)
  const kept = await place(app, token, true)
  const leftOut = await place(app, token, false)
  sandbox.crm.publishOrderProvisionRequested(kept.crmOrderId)
  sandbox.crm.publishOrderProvisionRequested(leftOut.crmOrderId)
  await waitFor('both orders Active', () => allActive(app, [kept.crmOrderId, leftOut.crmOrderId]), 30_000)

  const way = await wayBackFromActivation(kept.crmOrderId)
  t.match(way.map((span) => span.name), ['POST', /^telecom /, 'provisioning step: telecom activation', 'provisioning job', 'send provisioning', 'platform event hand-off'])
  t.equal(way.at(-1)?.attributes['http.route'], '/api/orders', 'the placement request')
  const handOff = way.find((span) => span.name === 'platform event hand-off')!
  t.match(handOff.attributes, { 'crm.order_id': kept.crmOrderId, 'order.id': String, 'billing.order_id': Number }, 'the hand-off carries the order\'s ids')

  // A kept request after it: once its span is in, any of the left-out order's would be too.
  await app.inject({ url: '/api/orders', headers: { ...bearer(token), traceparent: traceparent(true), 'x-correlation-id': 'order-trace-after' } })
  await receiver.span('the request after', (span) => span.attributes['correlation.id'] === 'order-trace-after')
  t.notOk(receiver.spans.some((span) => span.attributes['crm.order_id'] === leftOut.crmOrderId), 'no span of the order left out at placement')
})

t.test('an order the reconciliation provisions is kept whole too: its hand-off links to the placement', async (t) => {
  const sandbox = await startTestSandbox(t)
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'false', ORDERS_RECONCILE_INTERVAL_S: '3600' }, sandbox)
  const token = await login(app)
  const order = await place(app, token, true)
  sandbox.crm.updateOrder(order.crmOrderId, { Status: 'Approved' })
  await scopeWith(app, 'orderCrmStatus').orderCrmStatus.run(new AbortController().signal)
  await waitFor('the order Active', () => allActive(app, [order.crmOrderId]), 30_000)
  const way = await wayBackFromActivation(order.crmOrderId)
  t.match(way.map((span) => span.name), ['POST', /^telecom /, 'provisioning step: telecom activation', 'provisioning job', 'send provisioning', 'reconciliation hand-off'])
  t.equal(way.at(-1)?.attributes['http.route'], '/api/orders', 'the placement request')
})

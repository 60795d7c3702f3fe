import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTestApp, startTestSandbox } from '../../../helpers/app.js'
import { traceThisProcess } from '../../../helpers/otlp-receiver.js'
import { waitFor } from '../../../helpers/processes.js'
import { allActive, EVENTS_ON, eventsReport, placeOrder, STREAMING } from '../../../helpers/provisioning.js'
import { login } from '../../../helpers/tokens.js'

const receiver = await traceThisProcess(t)

t.test('an order from placement to Active: its placement, the event\'s hand-off, and the job linked to it with its three steps, each named with its outcome', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected', 10_000)
  const token = await login(app)
  const order = await placeOrder(app, token)
  const placement = await receiver.span('the placement', (span) => span.name === 'POST /api/orders')
  t.ok(receiver.spans.some((span) => span.traceId === placement.traceId && span.name === 'billing AddOrder'), 'the placement\'s billing call in its trace')

  sandbox.crm.publishOrderProvisionRequested(order.crmOrderId)
  await waitFor('the order Active', () => allActive(app, [order.crmOrderId]), 30_000)

  const handOff = await receiver.span('the hand-off', (span) => span.name === 'platform event hand-off' && span.attributes['crm.order_id'] === order.crmOrderId)
  t.equal(handOff.parentSpanId, undefined, 'the hand-off starts a trace')
  const query = await receiver.span('the hand-off\'s PostgreSQL statement', (span) => span.parentSpanId === handOff.spanId && span.name.startsWith('pg '))
  t.equal(query.attributes['db.system.name'], 'postgresql')
  t.notMatch(String(query.attributes['db.query.text']), order.crmOrderId, 'the statement carries no value')
  t.match(String(query.attributes['db.query.text']), /\$1\b/, 'and keeps its placeholders, as PostgreSQL shows them')
  const job = await receiver.span('the job', (span) => span.name === 'provisioning job' && span.attributes['crm.order_id'] === order.crmOrderId)
  t.match(handOff.attributes, { 'messaging.system': 'salesforce', 'messaging.operation.type': 'process' })
  const producer = await receiver.span('the job\'s producer span', (span) => span.parentSpanId === handOff.spanId && span.name === 'send provisioning')
  t.equal(producer.kind, 4, 'a producer span')
  t.match(producer.attributes, { 'messaging.system': 'bullmq', 'messaging.operation.type': 'send', 'messaging.destination.name': 'provisioning' })
  t.same(job.links, [{ traceId: handOff.traceId, spanId: producer.spanId }], 'the job links back to the producer span, in the hand-off that queued it')
  t.match(job.attributes, { 'messaging.system': 'bullmq', 'messaging.operation.type': 'process', 'messaging.destination.name': 'provisioning' })
  t.equal(job.attributes['job.attempt'], 1)

  const steps = () => receiver.children(job).filter((span) => span.name.startsWith('provisioning step: '))
  await waitFor('the three steps', async () => steps().length === 3)
  t.same(steps().map((span) => [span.name, span.attributes['provisioning.step.outcome']]).sort(), [
    ['provisioning step: CRM update', 'done'],
    ['provisioning step: billing acceptance', 'done'],
    ['provisioning step: telecom activation', 'done']
  ])
  const [telecom] = steps().filter((span) => span.name === 'provisioning step: telecom activation')
  t.ok(receiver.children(telecom!).some((span) => span.name.startsWith('telecom ')), 'the telecom call is a child of its step')

  sandbox.crm.publishOrderProvisionRequested('')
  const skipped = await receiver.span('the hand-off of an event naming no order', (span) => span.name === 'platform event hand-off' && span.attributes['crm.order_id'] === undefined)
  await app.close()
  const lines = readFileSync(join(app.config.LOG_DIR, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)
  t.match(lines.find((line) => line.message === 'provisioning requested' && line.crmOrderId === order.crmOrderId), { traceId: handOff.traceId }, 'the platform event\'s line names the hand-off\'s trace')
  t.match(lines.find((line) => line.message === 'OrderProvisionRequested__e without an OrderId__c: skipped'), { traceId: skipped.traceId }, 'and so does the line of an event it skips')
  t.match(lines.find((line) => line.message === 'order provisioned' && line.correlationId === `order:${order.crmOrderId}`), { traceId: job.traceId }, 'the job\'s, the job\'s')
})

t.test('an operator\'s retry of a parked event is a hand-off span too, and its lines name its trace', async (t) => {
  const sandbox = await startTestSandbox(t, STREAMING)
  const app = await buildTestApp(t, EVENTS_ON, sandbox)
  await waitFor('the subscription', async () => (await eventsReport(app)).state === 'connected', 10_000)
  const incomplete = sandbox.crm.putOrder({ Name: 'no billing order yet', Status: 'Pending Review', BillingClientId__c: '1', Product__c: '1' })
  sandbox.crm.publishOrderProvisionRequested(incomplete)
  const parked = async () => (await app.inject('/health/events/parked')).json().events as Array<{ id: string }>
  await waitFor('the event parked', async () => (await parked()).length === 1, 15_000)
  const [{ id }] = await parked() as [{ id: string }]
  t.equal((await app.inject({ method: 'POST', url: `/health/events/parked/${id}/retry` })).statusCode, 409, 'not mended: refused again')
  const spans = () => receiver.spans.filter((span) => span.name === 'platform event hand-off' && span.attributes['crm.order_id'] === incomplete)
  await waitFor('the event\'s hand-off and the retry\'s', async () => spans().length === 2)
  await app.close()
  const lines = readFileSync(join(app.config.LOG_DIR, 'combined.log'), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>)
  const refused = lines.find((line) => String(line.message).startsWith('parked platform event retried, still refused'))
  t.ok(spans().some((span) => span.traceId === refused?.traceId), 'the retry\'s line names its span\'s trace')
})

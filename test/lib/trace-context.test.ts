import t from 'tap'
import { EventEmitter } from 'node:events'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { context, createContextKey, ROOT_CONTEXT } from '@opentelemetry/api'
import type { FastifyBaseLogger } from 'fastify'
import { currentContext, currentTrace, runInContext } from '../../lib/request-context.js'
import { traceThisProcess } from '../helpers/otlp-receiver.js'

// The SDK's context lives in the request context's storage (lib/tracing-sdk.ts): each must survive the other.
await traceThisProcess(t)

const KEY = createContextKey('test value')
const work = (correlationId: string) => ({ correlationId, log: {} as FastifyBaseLogger })

t.test('a trace context set inside a request context keeps the request context, across awaits', async (t) => {
  await runInContext(work('outer'), async () => {
    await context.with(ROOT_CONTEXT.setValue(KEY, 'traced'), async () => {
      await nextTurn()
      t.equal(context.active().getValue(KEY), 'traced')
      t.equal(currentTrace(), context.active(), 'one storage holds both')
      t.equal(currentContext()?.correlationId, 'outer')
    })
    t.equal(context.active().getValue(KEY), undefined, 'the trace context ends with its callback')
    t.equal(currentContext()?.correlationId, 'outer')
  })
})

t.test('a request context set inside a trace context keeps the trace context', async (t) => {
  await context.with(ROOT_CONTEXT.setValue(KEY, 'traced'), async () => {
    await runInContext(work('inner'), async () => {
      await nextTurn()
      t.equal(context.active().getValue(KEY), 'traced')
      t.equal(currentContext()?.correlationId, 'inner')
    })
  })
  t.equal(currentContext(), undefined)
  t.equal(context.active(), ROOT_CONTEXT, 'outside both: the root context')
})

t.test('with() passes this and the arguments; bind() keeps a function and an emitter\'s listeners in their context', async (t) => {
  const traced = ROOT_CONTEXT.setValue(KEY, 'bound')
  const receiver = { factor: 3 }
  t.equal(context.with(traced, function (this: typeof receiver, value: number) { return this.factor * value }, receiver, 2), 6)
  const read = context.bind(traced, () => context.active().getValue(KEY))
  t.equal(read(), 'bound')
  const emitter = context.bind(traced, new EventEmitter())
  let heard: unknown
  emitter.on('ping', () => { heard = context.active().getValue(KEY) })
  emitter.emit('ping')
  t.equal(heard, 'bound')
})

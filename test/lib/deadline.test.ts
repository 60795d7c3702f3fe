import t from 'tap'
import { once } from 'node:events'
import { Deadline } from '../../lib/deadline.js'
import { before } from '../helpers/before.js'

/** Milliseconds until the deadline's signal aborts. */
async function abortsAfter (deadline: Deadline): Promise<number> {
  const started = performance.now()
  await once(deadline.signal, 'abort')
  return performance.now() - started
}

t.test('a deadline passes after its milliseconds, or aborts with its parent, and clear() stops it', async (t) => {
  const own = new Deadline(30)
  t.ok(await abortsAfter(own) >= 25, 'after its time')
  t.ok(own.passed && own.aborted)
  t.equal((own.signal.reason as DOMException).name, 'TimeoutError')

  const caller = new AbortController()
  const bounded = new Deadline(10_000, caller.signal)
  caller.abort(new Error('the caller went away'))
  t.ok(bounded.signal.aborted, 'at once with its parent')
  t.notOk(bounded.passed, 'its own time has not passed')
  t.ok(bounded.aborted)
  t.match(bounded.signal.reason, { message: 'the caller went away' })

  const unread = new Deadline(10)
  await new Promise(resolve => setTimeout(resolve, 30))
  t.ok(unread.passed, 'it passes with no signal made')
  t.ok(unread.signal.aborted, 'a signal first read after the end is aborted already')
  t.equal((unread.signal.reason as DOMException).name, 'TimeoutError')

  const cleared = new Deadline(20)
  cleared.clear()
  await new Promise(resolve => setTimeout(resolve, 40))
  t.notOk(cleared.signal.aborted || cleared.passed, 'a cleared deadline never fires')
})

t.test('a nested deadline ends with the outer one when that comes first, after the outer one has fired', async (t) => {
  const order: string[] = []
  const outer = new Deadline(60, undefined, () => order.push('outer passed'))
  t.teardown(() => outer.clear())
  await new Promise(resolve => setTimeout(resolve, 20))
  const nested = outer.nested(5000)
  nested.signal.addEventListener('abort', () => order.push('nested aborted'))
  t.ok(await before(5000, abortsAfter(nested)), 'ended with the outer one, before its own 5000 ms')
  t.same(order, ['outer passed', 'nested aborted'], 'the outer deadline\'s owner hears first')
  t.ok(nested.aborted)
  t.notOk(nested.passed, 'its own time has not passed: the call it bounds was abandoned')
  nested.clear()
})

t.test('a nested deadline ends at its own time when that comes first, and leaves the outer one running', async (t) => {
  const outer = new Deadline(10_000)
  t.teardown(() => outer.clear())
  const nested = outer.nested(30)
  t.equal(nested.ms, 30)
  await abortsAfter(nested)
  t.notOk(outer.aborted, 'the outer deadline goes on')
})

t.test('a nested deadline aborts with the outer one\'s parent, and one made after the outer end passes at once', async (t) => {
  const caller = new AbortController()
  const outer = new Deadline(10_000, caller.signal)
  t.teardown(() => outer.clear())
  const nested = outer.nested(5000)
  caller.abort()
  t.ok(nested.signal.aborted && nested.aborted, 'with the caller')
  t.notOk(nested.passed)

  const ended = new Deadline(10)
  await abortsAfter(ended)
  const late = ended.nested(5000)
  t.ok(late.signal.aborted && late.aborted, 'at once')
})

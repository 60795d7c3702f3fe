import t from 'tap'
import { parseExposition, typeOf } from '../../../dev/scripts/promtool.js'

// What the npm parsers of the text format got wrong (decision 0119): a histogram's labels, prom-client's
// `Nan`, and lines Prometheus refuses.
t.test('a histogram keeps every sample with its labels, le included', async (t) => {
  const exposition = parseExposition([
    '# HELP h_seconds How long.',
    '# TYPE h_seconds histogram',
    'h_seconds_bucket{le="0.1",route="/x"} 1',
    'h_seconds_bucket{le="+Inf",route="/x"} 2',
    'h_seconds_sum{route="/x"} 0.3',
    'h_seconds_count{route="/x"} 2',
    ''
  ].join('\n'))
  t.strictSame(exposition.samples, [
    { name: 'h_seconds_bucket', labels: { le: '0.1', route: '/x' }, value: 1 },
    { name: 'h_seconds_bucket', labels: { le: '+Inf', route: '/x' }, value: 2 },
    { name: 'h_seconds_sum', labels: { route: '/x' }, value: 0.3 },
    { name: 'h_seconds_count', labels: { route: '/x' }, value: 2 }
  ])
  t.equal(typeOf(exposition, 'h_seconds_bucket'), 'histogram')
  t.equal(exposition.help.get('h_seconds'), 'How long.')
})

t.test('values and label escapes as Prometheus reads them', async (t) => {
  const { samples } = parseExposition('g Nan\ng_inf +Inf\nc{path="C:\\\\DIR",error="a \\"b\\"\\nc"} 1.5e3 1395066363000\n')
  t.ok(Number.isNaN(samples[0]!.value), 'prom-client writes NaN as Nan')
  t.equal(samples[1]!.value, Infinity)
  t.strictSame(samples[2], { name: 'c', labels: { path: 'C:\\DIR', error: 'a "b"\nc' }, value: 1500 }, 'a timestamp is read past')
})

t.test('a line Prometheus would refuse is refused, naming it', async (t) => {
  for (const line of ['9bad 1', 'g notanumber', 'g 1 2 3', 'bad{x=} 1', '# TYPE g nonsense']) {
    t.throws(() => parseExposition(`${line}\n`), { message: new RegExp(line.replace(/[{}]/g, '\\$&')) }, line)
  }
})

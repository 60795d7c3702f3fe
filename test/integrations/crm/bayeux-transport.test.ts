import t from 'tap'
import { json, stubServer } from '../../helpers/http-stub.js'
import { BayeuxTransport, CookieJar } from '../../../integrations/crm/bayeux-transport.js'

t.test('the cookie jar keeps what Set-Cookie sets and forgets what it expires, by Max-Age or by a past Expires', async t => {
  const jar = new CookieJar()
  t.equal(jar.header(), undefined, 'nothing to send before the first answer')
  jar.store(['BAYEUX_BROWSER=b1; Path=/; Secure; HttpOnly', 'lb=node-3; Max-Age=3600'])
  t.equal(jar.header(), 'BAYEUX_BROWSER=b1; lb=node-3')
  jar.store('BAYEUX_BROWSER=b2; Expires=Fri, 01 Jan 2100 00:00:00 GMT')
  t.equal(jar.header(), 'BAYEUX_BROWSER=b2; lb=node-3', 'a new value replaces the old')
  jar.store('lb=; Max-Age=0')
  t.equal(jar.header(), 'BAYEUX_BROWSER=b2')
  jar.store('BAYEUX_BROWSER=gone; Expires=Thu, 01 Jan 1970 00:00:00 GMT')
  t.equal(jar.header(), undefined, 'an Expires in the past deletes it')
  jar.store('=nameless; Path=/')
  t.equal(jar.header(), undefined, 'a cookie without a name is ignored')
})

t.test('a cookie stops being sent once its time is up; Max-Age wins over Expires', async t => {
  const jar = new CookieJar()
  const now = Date.parse('2026-11-21T12:00:00Z')
  jar.store(['sfdc-stream=a; Expires=Sat, 21 Nov 2026 12:01:00 GMT', 'lb=b; Max-Age=30; Expires=Fri, 01 Jan 2100 00:00:00 GMT', 'BAYEUX_BROWSER=c'], now)
  t.equal(jar.header(now + 29_000), 'sfdc-stream=a; lb=b; BAYEUX_BROWSER=c')
  t.equal(jar.header(now + 30_000), 'sfdc-stream=a; BAYEUX_BROWSER=c', 'Max-Age is counted from the answer')
  t.equal(jar.header(now + 60_000), 'BAYEUX_BROWSER=c', 'Expires is a date; a session cookie stays')
})

t.test('an answer of a single message is taken as an array of one; anything else not', async t => {
  let answer = ''
  const transport = new BayeuxTransport(await stubServer(t, () => json(200, answer)), '60.0')
  t.teardown(() => transport.close())
  const handshake = [{ channel: '/meta/handshake', version: '1.0', supportedConnectionTypes: ['long-polling'] }]
  answer = JSON.stringify({ channel: '/meta/handshake', successful: true, clientId: 'c1' })
  t.same(await transport.send(handshake, 'token', 1000), [{ channel: '/meta/handshake', successful: true, clientId: 'c1' }])
  answer = JSON.stringify([{ channel: '/meta/handshake', successful: true, clientId: 'c2' }])
  t.same(await transport.send(handshake, 'token', 1000), [{ channel: '/meta/handshake', successful: true, clientId: 'c2' }])
  answer = '"handshake"'
  await t.rejects(transport.send(handshake, 'token', 1000), { name: 'StreamInterruption', failure: 'upstream_error', message: /not a message array/ })
})

import t from 'tap'
import { CookieJar } from '../../integrations/bayeux-transport.js'

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

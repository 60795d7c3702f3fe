import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildTestApp, scopeWith } from '../../../helpers/app.js'
import { buildTestAppOnPrivateRedis } from '../../../helpers/private-redis.js'
import { waitFor } from '../../../helpers/processes.js'
import { SESSION_COOKIE } from '../../../../plugins/app/access/sessions.js'

t.test('instances that read a session due for renewal at once write its renewal once', async (t) => {
  // An idle timeout of 10 s: a renewal interval of 1 s.
  const settings = { SESSION_IDLE_TIMEOUT_S: '10' }
  const { redis, app: first } = await buildTestAppOnPrivateRedis(t, settings)
  const second = await buildTestApp(t, { ...settings, REDIS_URL: redis.url, DATABASE_URL: first.config.DATABASE_URL, REDIS_KEY_PREFIX: first.config.REDIS_KEY_PREFIX })
  const signIn = await first.inject({ method: 'POST', url: '/auth/session', payload: { email: 'jane@example.com', password: 'correct-horse' } })
  t.equal(signIn.statusCode, 200)
  const cookie = signIn.cookies.find(({ name }) => name === SESSION_COOKIE)!.value
  const [{ sessions: firstSessions }, { sessions: secondSessions }] = [scopeWith(first, 'sessions'), scopeWith(second, 'sessions')]
  const session = (await firstSessions.read(cookie))!
  const key = `${first.config.REDIS_KEY_PREFIX}session:${session.id}`
  const signedIn = await first.redis.get(key)

  // Every command that writes the session's key, as Redis runs it (a script's own commands included).
  const monitored = redis.client(t)
  const monitor = await monitored.monitor()
  t.teardown(() => monitor.disconnect())
  const writes: string[][] = []
  monitor.on('monitor', (_time: string, args: string[]) => {
    if (args[0]!.toUpperCase() === 'SET' && args[1] === key) writes.push(args)
  })

  await sleep(firstSessions.renewalIntervalMs + 100)
  const [byFirst, bySecond] = await Promise.all([firstSessions.read(cookie), secondSessions.read(cookie)])
  t.ok(byFirst !== undefined && bySecond !== undefined, 'both instances read the live session')
  firstSessions.renew(byFirst!)
  secondSessions.renew(bySecond!)
  await waitFor('the renewal', async () => (await first.redis.get(key)) !== signedIn)
  // The other instance's renewal, if it wrote one, comes within a round trip or two.
  await sleep(300)
  t.equal(writes.length, 1, 'one write of the session for both instances')
  t.ok((await firstSessions.read(cookie))!.idleExpiresAt > session.idleExpiresAt, 'the session lasts longer')
})

t.test('asked after together, a revoked session is logged_out, one gone from Redis expired, a live one not ended', async (t) => {
  const app = await buildTestApp(t)
  const { sessions } = scopeWith(app, 'sessions')
  const signIn = async () => {
    const answer = await app.inject({ method: 'POST', url: '/auth/session', payload: { email: 'jane@example.com', password: 'correct-horse' } })
    const cookie = answer.cookies.find(({ name }) => name === SESSION_COOKIE)!.value
    return { cookie, session: (await sessions.read(cookie))! }
  }
  const [live, loggedOut, gone] = [await signIn(), await signIn(), await signIn()]
  const logout = await app.inject({ method: 'POST', url: '/auth/logout', headers: { cookie: `${SESSION_COOKIE}=${loggedOut.cookie}`, 'x-csrf': '1' } })
  t.equal(logout.statusCode, 204)
  await app.redis.del(`${app.config.REDIS_KEY_PREFIX}session:${gone.session.id}`)
  const ended = await sessions.ended([live.session.id, loggedOut.session.id, gone.session.id])
  t.same(Object.fromEntries(ended), { [loggedOut.session.id]: 'logged_out', [gone.session.id]: 'expired' })
})

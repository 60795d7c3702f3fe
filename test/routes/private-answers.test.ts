import t from 'tap'
import { get } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../helpers/app.js'
import { bearer, login } from '../helpers/tokens.js'
import { CSRF, JANE, ORDER, startSession } from '../helpers/sessions.js'

type Operation = { security?: Array<Record<string, unknown>> }
type OpenApiDocument = { paths: Record<string, Record<string, Operation>> }

/** Every operation of the app's own document that takes a token or the session cookie, but the stream (asked over a socket below). */
function credentialOperations (app: FastifyInstance): Array<{ method: string, path: string }> {
  const document = app.swagger() as unknown as OpenApiDocument
  return Object.entries(document.paths).flatMap(([path, operations]) => Object.entries(operations)
    .filter(([, operation]) => operation.security?.some((scheme) => 'bearerAuth' in scheme || 'sessionCookie' in scheme) === true)
    .map(([method]) => ({ method: method.toUpperCase(), path })))
    .filter(({ path }) => path !== '/api/events')
}

const varyNames = (value: unknown) => String(value ?? '').split(',').map((name) => name.trim().toLowerCase())

t.test('every answer that carries a client\'s data or a token is no-store, and varies on the cookie and Authorization where it depends on them', async (t) => {
  const app = await buildTestApp(t)
  const token = await login(app)
  const { cookie, response: signIn } = await startSession(app)
  const order = (await app.inject({ method: 'POST', url: '/api/orders', headers: bearer(token), payload: ORDER })).json() as { id: string }
  const sample = (path: string) => path.replace('{id}', path.startsWith('/api/orders') ? order.id : '1001')

  const signInAnswers = {
    'POST /auth/login (the token)': await app.inject({ method: 'POST', url: '/auth/login', payload: JANE }),
    'POST /auth/session': signIn,
    'POST /auth/login refused': await app.inject({ method: 'POST', url: '/auth/login', payload: { ...JANE, password: 'wrong' } })
  }
  for (const [name, response] of Object.entries(signInAnswers)) t.equal(response.headers['cache-control'], 'no-store', `${name}: ${response.statusCode}, no-store`)

  const operations = credentialOperations(app)
  t.ok(operations.length >= 8, `${operations.length} operations take a token or the cookie`)
  for (const { method, path } of operations.filter((operation) => !operation.path.startsWith('/auth/logout'))) {
    for (const [how, headers] of Object.entries({ 'with a token': bearer(token), 'with the cookie': { ...cookie, ...CSRF }, 'without credentials': {} })) {
      const response = await app.inject({ method: method as 'GET', url: sample(path), headers, ...(method === 'POST' && { payload: ORDER }) })
      const name = `${method} ${path} ${how}: ${response.statusCode}`
      t.equal(response.headers['cache-control'], 'no-store', `${name}, no-store`)
      t.ok(['cookie', 'authorization'].every((header) => varyNames(response.headers.vary).includes(header)), `${name}, Vary: ${response.headers.vary}`)
    }
  }
  for (const path of ['/auth/logout-all', '/auth/logout']) {
    const response = await app.inject({ method: 'POST', url: path, headers: bearer(await login(app)) })
    t.equal(response.statusCode, 204)
    t.equal(response.headers['cache-control'], 'no-store', `${path}: no-store`)
  }

  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const streamHeaders = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const request = get(`${address}/api/events`, { headers: { accept: 'text/event-stream', ...bearer(token) } }, (response) => {
      resolve(response.headers)
      request.destroy()
    })
    request.on('error', reject)
  })
  t.match(streamHeaders['cache-control'], /^no-store\b/, 'the event stream: no-store')
  t.ok(varyNames(streamHeaders.vary).includes('authorization'), `the event stream varies on Authorization: ${String(streamHeaders.vary)}`)
})

import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, testEnv } from '../helpers/app.js'
import { bearer, handMadeToken } from '../helpers/tokens.js'
import { TOKEN_AUDIENCE, TOKEN_ISSUER } from '../../plugins/external/jwt.js'

const SECRET = testEnv().JWT_SECRET!

type Operation = { security?: Array<Record<string, unknown>> }
type OpenApiDocument = { paths: Record<string, Record<string, Operation>> }

/** Every operation that takes the access token, from the app's own OpenAPI document: every /api/* route but the public one among them. */
function bearerOperations (app: FastifyInstance): Array<{ method: string, path: string }> {
  const document = app.swagger() as unknown as OpenApiDocument
  return Object.entries(document.paths).flatMap(([path, operations]) => Object.entries(operations)
    .filter(([, operation]) => operation.security?.some((scheme) => 'bearerAuth' in scheme) === true)
    .map(([method]) => ({ method: method.toUpperCase(), path: path.replaceAll(/\{[^}]+\}/g, '1') })))
}

t.test('a token signed with the secret but naming no client id, or another issuer or audience, is refused with 401 on every route that takes a token', async (t) => {
  // Sixty refusals from one address: past the default limit of failed token checks.
  const app = await buildTestApp(t, { TOKEN_FAILURES_MAX: '10000' })
  const now = Math.floor(Date.now() / 1000)
  const claims = (extra: object) => ({ sub: '1', jti: randomUUID(), iat: now, exp: now + 600, iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE, ...extra })
  const sound = handMadeToken(claims({}), { secret: SECRET })
  t.equal((await app.inject({ url: '/api/invoices', headers: bearer(sound) })).statusCode, 200, 'the hand-made token is sound with every claim right')

  const refused: Record<string, string> = {
    'sub "abc"': handMadeToken(claims({ sub: 'abc' }), { secret: SECRET }),
    'sub "-1"': handMadeToken(claims({ sub: '-1' }), { secret: SECRET }),
    'sub "1.5"': handMadeToken(claims({ sub: '1.5' }), { secret: SECRET }),
    'sub "0"': handMadeToken(claims({ sub: '0' }), { secret: SECRET }),
    'sub ""': handMadeToken(claims({ sub: '' }), { secret: SECRET }),
    'sub "01"': handMadeToken(claims({ sub: '01' }), { secret: SECRET }),
    'sub "1e3"': handMadeToken(claims({ sub: '1e3' }), { secret: SECRET }),
    'sub past the safe integers': handMadeToken(claims({ sub: '9007199254740993' }), { secret: SECRET }),
    'sub as a number': handMadeToken(claims({ sub: 1 }), { secret: SECRET }),
    'sub as a list': handMadeToken(claims({ sub: ['1'] }), { secret: SECRET }),
    'another issuer': handMadeToken(claims({ iss: 'another-service' }), { secret: SECRET }),
    'another audience': handMadeToken(claims({ aud: 'another-api' }), { secret: SECRET }),
    // As every token minted before iss and aud were set: its holder signs in again.
    'no issuer nor audience': handMadeToken({ sub: '1', jti: randomUUID(), iat: now, exp: now + 600 }, { secret: SECRET })
  }
  const operations = bearerOperations(app)
  const apiPaths = Object.keys((app.swagger() as unknown as OpenApiDocument).paths).filter((path) => path.startsWith('/api/') && path !== '/api/health/services/cache')
  t.same(apiPaths.filter((path) => !operations.some((operation) => operation.path === path.replaceAll(/\{[^}]+\}/g, '1'))), [], 'every /api/* path takes a token, but the public services cache report')
  t.ok(operations.length >= 8 && ['/api/invoices', '/api/orders', '/api/events', '/api/invoices/1', '/api/orders/1'].every((path) => operations.some((operation) => operation.path === path)), `${operations.length} operations take a token`)
  for (const { method, path } of operations) {
    for (const [kind, token] of Object.entries(refused)) {
      const response = await app.inject({ method: method as 'GET', url: path, headers: { ...bearer(token), 'content-type': 'application/json' }, payload: method === 'POST' ? '{}' : undefined })
      t.equal(response.statusCode, 401, `${method} ${path}, ${kind}: 401`)
      t.match(response.json(), { statusCode: 401, code: 'UNAUTHORIZED', correlationId: String }, `${method} ${path}, ${kind}: the error body`)
    }
  }
})

t.test('a token the service signs names its issuer and audience', async (t) => {
  const app = await buildTestApp(t)
  const token = await app.jwt.sign({ sub: '7', jti: randomUUID() })
  const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>
  t.match(claims, { sub: '7', iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE })
})

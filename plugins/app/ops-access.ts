import { createHash, timingSafeEqual } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { OpsUnauthorizedError } from '../../lib/errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * onRequest hook of the operator endpoints the specification does not name (/metrics,
     * /health/alerts, /status): with OPS_TOKEN set, `Authorization: Bearer <OPS_TOKEN>`, or HTTP
     * Basic with it as the password (so that a browser can open the status page). Unset, they are public.
     */
    requireOpsToken (request: FastifyRequest, reply: FastifyReply): Promise<void>
  }
}

const digest = (value: string) => createHash('sha256').update(value).digest()

/** The secret a request offers: a Bearer token, or the password of HTTP Basic credentials. */
function offered (authorization: string | undefined): string | undefined {
  if (authorization === undefined) return undefined
  const [scheme = '', value = ''] = authorization.split(' ', 2)
  if (/^bearer$/i.test(scheme)) return value
  if (!/^basic$/i.test(scheme)) return undefined
  const decoded = Buffer.from(value, 'base64').toString('utf8')
  const colon = decoded.indexOf(':')
  return colon === -1 ? undefined : decoded.slice(colon + 1)
}

async function opsAccess (fastify: FastifyInstance) {
  const { OPS_TOKEN } = fastify.config
  // Compared as digests of equal length, in constant time: the answer's timing tells nothing of the token.
  const expected = OPS_TOKEN === undefined ? undefined : digest(OPS_TOKEN)
  fastify.decorate('requireOpsToken', async (request: FastifyRequest, reply: FastifyReply) => {
    if (expected === undefined) return
    const secret = offered(request.headers.authorization)
    if (secret !== undefined && timingSafeEqual(digest(secret), expected)) return
    // The page asks the browser for credentials; machines are told the scheme to use.
    reply.header(
      'www-authenticate',
      request.url.startsWith('/status')
        ? 'Basic realm="Portal BFF operations", charset="UTF-8"'
        : 'Bearer realm="Portal BFF operations"'
    )
    throw new OpsUnauthorizedError()
  })
}

export default fp(opsAccess, { name: 'ops-access', fastify: '5.x', decorators: { fastify: ['config'] } })

import fp from 'fastify-plugin'
import fastifyCookie from '@fastify/cookie'
import type { FastifyInstance } from 'fastify'

async function cookie (fastify: FastifyInstance) {
  // No parsing hook: only a request without a bearer token reads its cookie, when it is
  // authenticated; every other request (the probes above all) pays nothing for it.
  await fastify.register(fastifyCookie, { hook: false })
}

export default fp(cookie, { name: 'cookie', fastify: '5.x' })

import fp from 'fastify-plugin'
import fastifySensible from '@fastify/sensible'
import type { FastifyInstance } from 'fastify'

async function sensible (fastify: FastifyInstance) {
  await fastify.register(fastifySensible)
}

export default fp(sensible, { name: 'sensible', fastify: '5.x' })

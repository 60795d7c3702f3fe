import { createHmac } from 'node:crypto'
import type { FastifyInstance } from 'fastify'

const base64url = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url')

/** A JWT made by hand, for tokens the service must refuse: expired, forged, `alg: none`. */
export function handMadeToken (claims: object, { secret, alg = 'HS256' }: { secret?: string, alg?: string } = {}): string {
  const unsigned = `${base64url({ alg, typ: 'JWT' })}.${base64url(claims)}`
  if (alg === 'none') return `${unsigned}.`
  const signature = createHmac('sha256', secret ?? 'another-secret-of-at-least-32-characters').update(unsigned).digest('base64url')
  return `${unsigned}.${signature}`
}

export async function login (app: FastifyInstance, email = 'jane@example.com', password = 'correct-horse'): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/auth/login', payload: { email, password } })
  if (response.statusCode !== 200) throw new Error(`login failed: ${response.statusCode} ${response.body}`)
  return response.json().accessToken
}

export function bearer (token: string): { authorization: string } {
  return { authorization: `Bearer ${token}` }
}

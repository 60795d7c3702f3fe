import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { SESSION_COOKIE } from '../../plugins/app/access/sessions.js'

export const JANE = { email: 'jane@example.com', password: 'correct-horse' }
export const JOHN = { email: 'john@example.com', password: 'battery-staple' }
export const ORDER = { productId: 1, billingCycle: 'monthly' }
export const CSRF = { 'x-csrf': '1' }

/** Signs Jane (or another user) in with a cookie session; answers the cookie header a browser would send, and the answer. */
export async function startSession (app: FastifyInstance, user = JANE, headers: Record<string, string> = {}): Promise<{ cookie: { cookie: string }, response: LightMyRequestResponse }> {
  const response = await app.inject({ method: 'POST', url: '/auth/session', headers, payload: user })
  if (response.statusCode !== 200) throw new Error(`sign-in failed: ${response.statusCode} ${response.body}`)
  const value = response.cookies.find((cookie) => cookie.name === SESSION_COOKIE)?.value
  return { cookie: { cookie: `${SESSION_COOKIE}=${value}` }, response }
}

export const status = async (app: FastifyInstance, headers: Record<string, string>, url = '/api/invoices') =>
  (await app.inject({ method: 'GET', url, headers })).statusCode

/**
 * The token of an `Authorization: Bearer <token>` header, read as @fastify/jwt reads it (the scheme
 * in any case, one space, one token); undefined for any other form.
 */
export function bearerToken (authorization: string): string | undefined {
  if (!/^Bearer\s/i.test(authorization)) return undefined
  const parts = authorization.split(' ')
  return parts.length === 2 && parts[1] !== '' ? parts[1] : undefined
}

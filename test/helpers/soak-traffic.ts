import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'

/** One answer the soak's traffic got, or the lack of one, at milliseconds since the soak began. */
export interface Exchange {
  route: string
  sentAt: number
  tookMs: number
  /** 0 when no answer came within the client's bound. */
  status: number
  /** The parsed body of a 5xx or a health probe (what is judged), the error of a request that failed; else undefined. */
  body: unknown
}

interface Route {
  name: string
  method: 'GET' | 'POST'
  path: () => string
  body?: object
  signedIn?: boolean
  /** Answers other than 5xx that this route may give; a 5xx is judged by its shape and time instead. */
  expected: number[]
  weight: number
}

// What the portal and the operators do, roughly in proportion.
const ROUTES: Route[] = [
  { name: 'GET /health/live', method: 'GET', path: () => '/health/live', expected: [200], weight: 1 },
  { name: 'GET /health/ready', method: 'GET', path: () => '/health/ready', expected: [200], weight: 1 },
  { name: 'GET /health/queues', method: 'GET', path: () => '/health/queues', expected: [200], weight: 1 },
  { name: 'GET /health/alerts', method: 'GET', path: () => '/health/alerts', expected: [200], weight: 1 },
  { name: 'GET /metrics', method: 'GET', path: () => '/metrics', expected: [200], weight: 1 },
  { name: 'GET /status/summary', method: 'GET', path: () => '/status/summary', expected: [200], weight: 1 },
  { name: 'GET /auth/health-check', method: 'GET', path: () => '/auth/health-check', expected: [200], weight: 1 },
  { name: 'POST /auth/login', method: 'POST', path: () => '/auth/login', body: { email: 'jane@example.com', password: 'correct-horse' }, expected: [200], weight: 1 },
  { name: 'GET /api/invoices', method: 'GET', path: () => `/api/invoices?page=${1 + Math.floor(Math.random() * 3)}&limit=2`, signedIn: true, expected: [200], weight: 4 },
  { name: 'GET /api/invoices/:id', method: 'GET', path: () => `/api/invoices/${[1001, 1002, 1004, 2001][Math.floor(Math.random() * 4)]}`, signedIn: true, expected: [200, 404], weight: 2 },
  { name: 'POST /api/orders', method: 'POST', path: () => '/api/orders', body: { productId: 1, billingCycle: 'monthly' }, signedIn: true, expected: [201], weight: 1 },
  { name: 'GET /api/orders', method: 'GET', path: () => '/api/orders', signedIn: true, expected: [200], weight: 2 }
]

function pick (): Route {
  let roll = Math.random() * ROUTES.reduce((sum, route) => sum + route.weight, 0)
  for (const route of ROUTES) {
    roll -= route.weight
    if (roll < 0) return route
  }
  return ROUTES[0]!
}

export function expectedStatuses (routeName: string): number[] {
  return ROUTES.find((route) => route.name === routeName)?.expected ?? []
}

async function exchange (baseUrl: string, route: { name: string, method: 'GET' | 'POST', path: string, body?: object, headers?: Record<string, string> }, started: number, boundMs: number): Promise<Exchange> {
  const sentAt = performance.now() - started
  try {
    const response = await request(`${baseUrl}${route.path}`, {
      method: route.method,
      headers: { ...route.headers, ...(route.body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: route.body === undefined ? undefined : JSON.stringify(route.body),
      headersTimeout: boundMs,
      bodyTimeout: boundMs
    })
    const text = await response.body.text()
    // Minutes of answers would not fit in memory: only what the soak judges is kept.
    const judged = response.statusCode >= 500 || route.name === 'GET /health'
    let body: unknown = judged ? text : undefined
    if (judged) {
      try {
        body = JSON.parse(text)
      } catch {
        // judged as not in a documented shape
      }
    }
    return { route: route.name, sentAt, tookMs: performance.now() - started - sentAt, status: response.statusCode, body }
  } catch (error) {
    return { route: route.name, sentAt, tookMs: performance.now() - started - sentAt, status: 0, body: String(error) }
  }
}

/** Where the traffic goes, how long one answer may take, the soak's start (for `sentAt`) and its end. */
interface TrafficOptions {
  baseUrl: string
  boundMs: number
  started: number
  signal: AbortSignal
}

/**
 * Mixed portal and operator traffic from `workers` loops until `signal` aborts, every request bounded
 * by `boundMs` on the client side (a request with no answer by then is recorded as status 0).
 */
export async function mixedTraffic ({ baseUrl, token, workers, boundMs, started, signal }: TrafficOptions & { token: string, workers: number }): Promise<Exchange[]> {
  const exchanges: Exchange[] = []
  await Promise.all(Array.from({ length: workers }, async () => {
    while (!signal.aborted) {
      const route = pick()
      exchanges.push(await exchange(baseUrl, {
        name: route.name,
        method: route.method,
        path: route.path(),
        body: route.body,
        headers: route.signedIn === true ? { authorization: `Bearer ${token}` } : {}
      }, started, boundMs))
      await sleep(10)
    }
  }))
  return exchanges
}

/** The uptime monitor: `GET /health` every `everyMs` until `signal` aborts. */
export async function healthProbes ({ baseUrl, everyMs, boundMs, started, signal }: TrafficOptions & { everyMs: number }): Promise<Exchange[]> {
  const probes: Exchange[] = []
  while (!signal.aborted) {
    const probe = exchange(baseUrl, { name: 'GET /health', method: 'GET', path: '/health' }, started, boundMs)
    await sleep(everyMs)
    probes.push(await probe)
  }
  return probes
}

/**
 * CORS at the gateway (issue 18): preflights answered before authentication and never forwarded, CORS headers
 * on forwarded answers, on the echo upstream and on every refusal, nothing for an origin not allowed (but
 * `Vary: Origin`), per-route overrides, `cors: false`, `upstream: true`, and nothing at all without `cors`.
 * Origins, patterns and header injection: test/cors/origins.test.ts; config errors: test/cors/config.test.ts.
 */
import http from 'node:http'
import { describe, expect, it, type TestContext } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream, type UpstreamOptions } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

const APP = 'https://app.example.com'
const OTHER = 'https://other.example.org'
const ROUTES = [
  { id: 'orders', path: '/api/orders/{id}', methods: ['GET', 'DELETE'], upstream: 'main', scopes: { all: ['orders:read'] } },
  { id: 'api', path: '/api/**', upstream: 'main' },
  { id: 'reports', path: '/reports/**', methods: ['GET'], upstream: 'main' },
  { id: 'slow', path: '/slow/**', upstream: 'main' },
]
/** What an upstream that does CORS itself says. */
const UPSTREAM_CORS = { 'access-control-allow-origin': '*', 'access-control-allow-methods': 'GET', vary: 'Accept-Encoding' }

interface Harness { upstream: RecordingUpstream; issuer: TestIssuer; gateway: RunningGateway; token: string }

async function start(test: TestContext, parts: { cors?: unknown; routes?: unknown[]; upstream?: UpstreamOptions; upstreamExtra?: Record<string, unknown>;
  server?: Record<string, unknown> } = {}): Promise<Harness> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(parts.upstream ?? { responseHeaders: UPSTREAM_CORS }), startTestIssuer()])
  const config = testConfig({ upstream, issuer, routes: (parts.routes ?? ROUTES) as Record<string, unknown>[],
    ...(parts.upstreamExtra && { upstreamExtra: parts.upstreamExtra }), ...(parts.server && { server: parts.server }) })
  const gateway = await startGateway({ ...config, ...(parts.cors !== undefined && { cors: parts.cors }) })
  test.onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer, gateway, token: await issuer.sign({ sub: 'alice', scope: 'orders:read' }) }
}

/** The response's CORS headers and Vary, for one assertion. */
function corsOf(res: Response): Record<string, string> {
  return Object.fromEntries([...res.headers].filter(([name]) => name.startsWith('access-control-') || name === 'vary'))
}

function preflight(h: Harness, path: string, origin: string, method = 'GET', headers = 'authorization'): Promise<Response> {
  return fetch(h.gateway.url + path, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': headers } })
}

function call(h: Harness, path: string, origin: string | undefined, init: RequestInit & { token?: string | false } = {}): Promise<Response> {
  const { token, ...rest } = init
  return fetch(h.gateway.url + path, { ...rest, headers: { ...(origin !== undefined && { origin }),
    ...(token !== false && { authorization: `Bearer ${token ?? h.token}` }), ...rest.headers as Record<string, string> } })
}

/** What a page may read of every answer: the challenge, the rate limit fields, Retry-After and DPoP-Nonce. */
const EXPOSED = 'WWW-Authenticate, RateLimit, RateLimit-Policy, Retry-After, DPoP-Nonce'
const ALLOWED = { 'access-control-allow-origin': APP, 'access-control-expose-headers': EXPOSED, vary: 'Origin' }
const PREFLIGHT_VARY = 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers'

describe('preflight', () => {
  it('is answered 204 for the route the request would meet, before authentication, and never forwarded', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] } })
    const res = await preflight(h, '/api/orders/42', APP)
    expect(res.status).toBe(204)
    expect(corsOf(res)).toEqual({
      'access-control-allow-origin': APP, 'access-control-allow-methods': 'GET, DELETE', 'access-control-allow-headers': 'Authorization, Content-Type',
      'access-control-max-age': '600', vary: PREFLIGHT_VARY,
    })
    // Another route at another path: its methods (all of them, no list).
    expect((await preflight(h, '/api/things', APP, 'PUT', 'authorization, content-type')).headers.get('access-control-allow-methods'))
      .toBe('GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS')
    expect(h.upstream.requests).toHaveLength(0)
  })

  it('is refused without any CORS header when the origin, method or a header is not allowed, or no route serves it', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP], allowed_methods: ['GET', 'POST'] } })
    const refusals: Array<[Response, number]> = [
      [await preflight(h, '/api/orders/42', OTHER), 403],
      [await preflight(h, '/api/orders/42', APP, 'DELETE'), 403],   // the route takes DELETE, cors.allowed_methods does not
      [await preflight(h, '/api/orders/42', APP, 'GET', 'authorization, x-debug'), 403],
      [await preflight(h, '/reports/q1', APP, 'PUT'), 405],      // the request would get 405: so does its preflight
      [await preflight(h, '/elsewhere', APP), 404],
    ]
    for (const [res, status] of refusals) {
      expect(res.status).toBe(status)
      expect(corsOf(res)).toEqual({})
      expect((await res.json() as { error: string }).error).toBe(status === 403 ? 'access_denied' : status === 404 ? 'not_found' : 'method_not_allowed')
    }
    expect(h.gateway.logs.join('')).toContain('cors_header_not_allowed: x-debug')
    expect(h.upstream.requests).toHaveLength(0)
  })

  it('says Access-Control-Allow-Credentials: true and a configured max_age', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP], allow_credentials: true, max_age: '1h' } })
    const res = await preflight(h, '/api/orders/42', APP)
    expect(res.status).toBe(204)
    expect(res.headers.get('access-control-allow-credentials')).toBe('true')
    expect(res.headers.get('access-control-max-age')).toBe('3600')
  })

  it('is an ordinary OPTIONS request without Access-Control-Request-Method, or without Origin', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] } })
    const noMethod = await fetch(`${h.gateway.url}/api/things`, { method: 'OPTIONS', headers: { origin: APP } })
    expect(noMethod.status).toBe(401)   // matched, authenticated as any request: and answered with CORS headers
    expect(corsOf(noMethod)).toEqual(ALLOWED)
    const noOrigin = await fetch(`${h.gateway.url}/api/things`, { method: 'OPTIONS', headers: { 'access-control-request-method': 'GET' } })
    expect(noOrigin.status).toBe(401)
    expect(corsOf(noOrigin)).toEqual({})
    expect(h.upstream.requests).toHaveLength(0)
  })
})

describe('actual requests', () => {
  it('forwarded: the gateway\'s CORS headers replace the upstream\'s, Origin joins its Vary', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP], exposed_headers: ['X-Upstream'] } })
    const res = await call(h, '/api/orders/42', APP)
    expect(res.status).toBe(200)
    expect(corsOf(res)).toEqual({ 'access-control-allow-origin': APP, 'access-control-expose-headers': `${EXPOSED}, X-Upstream`, vary: 'Accept-Encoding, Origin' })
    expect(h.upstream.requests[0]!.headers.origin).toBe(APP)
  })

  it('an origin not allowed gets no CORS header, only Vary: Origin, on answers and refusals', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] } })
    const forwarded = await call(h, '/api/orders/42', OTHER)
    expect(forwarded.status).toBe(200)
    expect(corsOf(forwarded)).toEqual({ vary: 'Accept-Encoding, Origin' })
    const refused = await call(h, '/api/orders/42', OTHER, { token: false })
    expect(refused.status).toBe(401)
    expect(corsOf(refused)).toEqual({ vary: 'Origin' })
  })

  it('without an Origin header, nothing changes: the upstream\'s own headers pass, no Vary is added', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] } })
    const res = await call(h, '/api/orders/42', undefined)
    expect(corsOf(res)).toEqual(UPSTREAM_CORS)
  })

  it('the echo upstream\'s answers carry them too', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP], allow_credentials: true } })
    await h.gateway.close()
    const echo = await startGateway({ ...testConfig({ upstream: { url: 'builtin:echo' }, issuer: h.issuer, routes: [{ id: 'api', path: '/api/**', upstream: 'main' }] }),
      cors: { allowed_origins: [APP], allow_credentials: true } })
    test.onTestFinished(() => echo.close())
    const res = await fetch(`${echo.url}/api/x`, { headers: { origin: APP, authorization: `Bearer ${h.token}` } })
    expect(res.status).toBe(200)
    expect(corsOf(res)).toEqual({ ...ALLOWED, 'access-control-allow-credentials': 'true' })
  })
})

describe('refusals the gateway renders carry the CORS headers, so a SPA can read them', () => {
  it('401 (with its challenge exposed), 403, 404, 405, 413, 400, and none of them reaches the upstream', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] }, server: { max_body_size: '1kb' } })
    const weak = await h.issuer.sign({ sub: 'bob', scope: 'other' })
    const cases: Array<[Promise<Response>, number]> = [
      [call(h, '/api/orders/42', APP, { token: false }), 401],
      [call(h, '/api/orders/42', APP, { token: 'not-a-jwt' }), 401],
      [call(h, '/api/orders/42', APP, { token: weak }), 403],
      [call(h, '/nowhere', APP), 404],
      [call(h, '/reports/q1', APP, { method: 'PUT' }), 405],
      [call(h, '/api/things', APP, { method: 'POST', body: 'x'.repeat(2048) }), 413],
      [call(h, '/api/%41dmin', APP), 400],
    ]
    for (const [pending, status] of cases) {
      const res = await pending
      expect(res.status).toBe(status)
      expect(corsOf(res)).toEqual(ALLOWED)
    }
    const challenge = await call(h, '/api/orders/42', APP, { token: false })
    expect(challenge.headers.get('www-authenticate')).toBe('Bearer realm="test"')
    expect(h.upstream.requests).toHaveLength(0)
  })

  it('502 when the upstream is down, 503 when its connections stay busy, 408 when the body stalls', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] }, upstream: { slowMs: 600 },
      upstreamExtra: { connections: 1, queue_timeout: '50ms' }, server: { body_timeout: '100ms' } })
    const slow = call(h, '/slow/report', undefined)
    await new Promise((resolve) => setTimeout(resolve, 100))
    const busy = await call(h, '/api/things', APP)
    expect([busy.status, corsOf(busy)]).toEqual([503, ALLOWED])
    expect((await slow).status).toBe(200)
    const stalled = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(`${h.gateway.url}/api/upload`, { method: 'POST',
        headers: { origin: APP, authorization: `Bearer ${h.token}`, 'content-length': '100' } }, resolve)
      req.on('error', reject)
      req.write('partial')   // …and nothing more
    })
    expect([stalled.statusCode, stalled.headers['access-control-allow-origin'], stalled.headers.vary]).toEqual([408, APP, 'Origin'])
    stalled.destroy()
    await h.upstream.close()
    const down = await call(h, '/api/things', APP)
    expect([down.status, corsOf(down)]).toEqual([502, ALLOWED])
  })
})

describe('per route', () => {
  const routes = [
    { id: 'partner', path: '/partner/**', upstream: 'main', cors: { allowed_origins: [OTHER], allowed_methods: ['GET'], max_age: '30s' } },
    { id: 'internal', path: '/internal/**', upstream: 'main', cors: false },
    { id: 'legacy', path: '/legacy/**', upstream: 'main', cors: { upstream: true } },
    ...ROUTES,
  ]

  it('an override replaces the keys it names and keeps the others', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP], allowed_headers: ['Authorization', 'X-Tenant'] }, routes })
    expect((await preflight(h, '/partner/a', APP)).status).toBe(403)
    const res = await preflight(h, '/partner/a', OTHER, 'GET', 'x-tenant')
    expect(corsOf(res)).toEqual({ 'access-control-allow-origin': OTHER, 'access-control-allow-methods': 'GET',
      'access-control-allow-headers': 'Authorization, X-Tenant', 'access-control-max-age': '30', vary: PREFLIGHT_VARY })
    expect(corsOf(await call(h, '/partner/a', OTHER))).toEqual({ ...ALLOWED, 'access-control-allow-origin': OTHER, vary: 'Accept-Encoding, Origin' })
    expect(h.upstream.requests.map((r) => r.method)).toEqual(['GET'])
  })

  it('cors: false: as without CORS, a preflight is an ordinary OPTIONS request and answers are untouched', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] }, routes })
    const res = await preflight(h, '/internal/a', APP)
    expect([res.status, corsOf(res)]).toEqual([401, {}])
    expect(corsOf(await call(h, '/internal/a', APP))).toEqual(UPSTREAM_CORS)
    expect(h.upstream.requests.map((r) => r.method)).toEqual(['GET'])
  })

  it('upstream: true: a preflight with a body is 400 invalid_request, and nothing reaches the upstream', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] }, routes })
    for (const framing of [{ 'content-length': '11' }, { 'transfer-encoding': 'chunked' }]) {
      const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request(`${h.gateway.url}/legacy/a`, {
          method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'POST', ...framing },
        }, (response) => {
          let body = ''
          response.on('data', (chunk: Buffer) => { body += chunk.toString() })
          response.on('end', () => resolve({ status: response.statusCode!, body }))
        })
        req.on('error', reject)
        req.end('hello world')
      })
      expect(res.status, JSON.stringify(framing)).toBe(400)
      expect(res.body).toContain('invalid_request')
    }
    expect(h.upstream.requests).toHaveLength(0)
  })

  it('upstream: true: the preflight is forwarded without authentication, and the gateway adds nothing', async (test) => {
    const h = await start(test, { cors: { allowed_origins: [APP] }, routes })
    const res = await preflight(h, '/legacy/a', OTHER)
    expect([res.status, corsOf(res)]).toEqual([200, UPSTREAM_CORS])
    const forwarded = h.upstream.requests[0]!
    expect([forwarded.method, forwarded.url, forwarded.headers['x-auth-subject'], forwarded.headers['access-control-request-method']])
      .toEqual(['OPTIONS', '/legacy/a', undefined, 'GET'])
    expect(corsOf(await call(h, '/legacy/a', APP))).toEqual(UPSTREAM_CORS)
    expect(corsOf(await call(h, '/legacy/a', APP, { token: false }))).toEqual({})
  })

  it('a route may turn CORS on by itself; then the rest of the gateway stays as it was', async (test) => {
    const h = await start(test, { routes: [{ ...ROUTES[0], cors: { allowed_origins: [APP] } }, ...ROUTES.slice(1)] })
    expect((await preflight(h, '/api/orders/42', APP)).status).toBe(204)
    expect((await preflight(h, '/api/things', APP)).status).toBe(401)
    expect(corsOf(await call(h, '/api/things', APP))).toEqual(UPSTREAM_CORS)
    expect(corsOf(await call(h, '/nowhere', APP))).toEqual({})
  })
})

it('without cors, a preflight is an ordinary request and no response changes', async (test) => {
  const h = await start(test)
  const res = await preflight(h, '/api/things', APP)
  expect([res.status, corsOf(res)]).toEqual([401, {}])
  expect(corsOf(await call(h, '/api/orders/42', APP))).toEqual(UPSTREAM_CORS)
  expect(corsOf(await call(h, '/api/orders/42', APP, { token: false }))).toEqual({})
})

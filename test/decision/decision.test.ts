/**
 * Issue 23, the decision endpoint, called as each proxy calls it (nginx and ingress-nginx, Traefik and Caddy,
 * Envoy's ext_authz HTTP service): the proxy mode's answers, the same challenge byte for byte; the identity
 * headers on an allowed decision; trust by address, shared secret and client certificate; what a proxy may
 * cache and for how long; every abuse of the describing headers refused. The real proxies are in
 * test/decision/proxies.test.ts. No decision ever reaches the upstream: each test checks it got nothing.
 */
import { request as httpsRequest } from 'node:https'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { configProblems } from '../support/config-problems.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { createTestCa, type TestCa } from '../support/tls.js'
import { stringify } from 'yaml'
import { loadConfig } from '../../src/check/load.js'

const SECRET = 'a-decision-secret-of-at-least-32-characters'

const ROUTES = [
  { id: 'orders-read', path: '/orders/**', methods: ['GET', 'HEAD'], upstream: 'main', scopes: { all: ['orders:read'] }, claim_headers: { 'X-Tenant': 'tenant' } },
  { id: 'orders-write', path: '/orders/**', methods: ['POST'], upstream: 'main', scopes: { all: ['orders:write'] } },
  { id: 'public', path: '/public/**', upstream: 'main', auth: 'none' },
  { id: 'tenant', path: '/t/{tenant}/**', upstream: 'main', claims: { all: [{ claim: 'tenant', equals: { param: 'tenant' } }] } },
  { id: 'by-header', path: '/h/**', upstream: 'main', claims: { all: [{ claim: 'tenant', equals: { header: 'X-Tenant-Id' } }] } },
  { id: 'limited', path: '/limited/**', upstream: 'main', rate_limits: ['two'] },
  { id: 'ws', path: '/ws', methods: ['GET'], upstream: 'main' },
]

let upstream: RecordingUpstream
const config = (decision: Record<string, unknown>) => ({
  ...testConfig({ upstream, issuer, routes: ROUTES }),
  rate_limits: { policies: { two: { limit: 2, window: '1m', key: 'address' } } },
  decision: { listen: '127.0.0.1:0', ...decision },
})
let issuer: TestIssuer
let gateway: RunningGateway
let decide: string

beforeAll(async () => {
  ;[upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startGateway(config({}))
  decide = `${gateway.decisionUrl!}/decide`
})
afterAll(async () => {
  expect(upstream.requests).toHaveLength(0)
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

const token = (claims: Record<string, unknown> = {}, expiresIn?: number) =>
  issuer.sign({ scope: 'orders:read', tenant: 'acme', ...claims }, expiresIn === undefined ? {} : { expiresIn })

/** An nginx `auth_request` subrequest for `method target` (the snippet in docs/decision.md). */
const nginx = (method: string, target: string, headers: Record<string, string> = {}) =>
  fetch(decide, { headers: { 'x-original-method': method, 'x-original-uri': target, ...headers } })

async function answer(response: Response) {
  return { status: response.status, challenge: response.headers.get('www-authenticate'), body: await response.text(),
    cache: response.headers.get('cache-control') }
}

describe('answers as the proxy mode would', () => {
  it('allows with 200, the identity and claim headers, no body, cacheable for 1 s', async () => {
    const response = await nginx('GET', '/orders/1?x=1', { authorization: `Bearer ${await token()}`, 'x-auth-subject': 'spoofed' })
    expect(response.status).toBe(200)
    expect(response.headers.get('x-auth-subject')).toBe('user-1')
    expect(response.headers.get('x-auth-client-id')).toBe('client-1')
    expect(response.headers.get('x-auth-scopes')).toBe('orders:read')
    expect(response.headers.get('x-auth-issuer')).toBe(issuer.issuer)
    expect(response.headers.get('x-tenant')).toBe('acme')
    expect(response.headers.get('cache-control')).toBe('s-maxage=1')
    // nginx keeps a cached answer through the second X-Accel-Expires names: the current one, so at most 1 s.
    const second = Number(response.headers.get('x-accel-expires')!.slice(1))
    expect(Math.abs(second - Math.floor(Date.now() / 1000))).toBeLessThanOrEqual(1)
    expect(await response.text()).toBe('')
  })

  it('refuses with the status, challenge and body of the proxy mode, never cacheable', async () => {
    const good = await token()
    const readOnly = await token({ scope: 'orders:read' })
    const cases: Array<[string, string, Record<string, string>]> = [
      ['GET', '/orders/1', {}],
      ['GET', '/orders/1', { authorization: 'Bearer not.a.jwt' }],
      ['GET', '/orders/1', { authorization: `Bearer ${await token({}, -60)}` }],
      ['POST', '/orders/1', { authorization: `Bearer ${readOnly}` }],
      ['GET', '/t/other/x', { authorization: `Bearer ${good}` }],
      ['GET', '/nowhere', { authorization: `Bearer ${good}` }],
      ['DELETE', '/orders/1', { authorization: `Bearer ${good}` }],
      ['GET', '/orders/1?access_token=abc', { authorization: `Bearer ${good}` }],
      ['GET', '/orders/a%2fb', { authorization: `Bearer ${good}` }],
    ]
    for (const [method, target, headers] of cases) {
      const viaProxy = await answer(await fetch(`${gateway.url}${target}`, { method, headers }))
      const decided = await answer(await nginx(method, target, headers))
      expect(decided, `${method} ${target}`).toEqual(viaProxy)
      expect(decided.status).toBeGreaterThanOrEqual(400)
      expect(decided.cache).toBe('no-store')
    }
    // The proxy-mode calls above were refused too: nothing forwarded by either.
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 405 with the Allow header of the path', async () => {
    const response = await nginx('DELETE', '/orders/1', { authorization: `Bearer ${await token()}` })
    expect(response.status).toBe(405)
    expect(response.headers.get('allow')).toBe('GET, HEAD, POST')
  })

  it('allows a route without auth with no identity headers, and a HEAD like its GET', async () => {
    const open = await nginx('GET', '/public/x', { 'x-auth-subject': 'spoofed' })
    expect(open.status).toBe(200)
    // Named, empty: a proxy copying it replaces the client's copy with nothing.
    expect(open.headers.get('x-auth-subject')).toBe('')
    expect(open.headers.get('x-auth-scopes')).toBe('')
    expect((await nginx('HEAD', '/orders/1', { authorization: `Bearer ${await token()}` })).status).toBe(200)
  })
})

describe('the describing headers, as each proxy sends them', () => {
  it('reads ingress-nginx (X-Original-URL), Traefik and Caddy (X-Forwarded-*) and Envoy (/envoy prefix) alike', async () => {
    const authorization = `Bearer ${await token()}`
    const ingress = await fetch(decide, { headers: { authorization, 'x-original-url': 'https://shop.example/orders/7?a=b', 'x-original-method': 'GET', 'x-forwarded-proto': '' } })
    expect(ingress.status).toBe(200)
    // ingress-nginx with `auth-method` sends X-Original-URI too: the same target.
    const both = await fetch(decide, { headers: { authorization, 'x-original-url': 'https://shop.example/orders/7', 'x-original-uri': '/orders/7', 'x-original-method': 'GET' } })
    expect(both.status).toBe(200)
    const traefik = await fetch(decide, { headers: { authorization, 'x-forwarded-method': 'GET', 'x-forwarded-uri': '/orders/7', 'x-forwarded-host': 'shop.example', 'x-forwarded-proto': 'https' } })
    expect(traefik.status).toBe(200)
    expect(traefik.headers.get('x-auth-subject')).toBe('user-1')
    // Envoy: the original method and path under path_prefix, Host and Authorization as sent, Content-Length: 0.
    const envoy = await fetch(`${gateway.decisionUrl!}/envoy/orders/7?a=b`, { headers: { authorization, 'content-length': '0', 'x-envoy-expected-rq-timeout-ms': '200' } })
    expect(envoy.status).toBe(200)
    expect(envoy.headers.get('x-auth-scopes')).toBe('orders:read')
    const envoyDenied = await fetch(`${gateway.decisionUrl!}/envoy/orders/7`, { method: 'POST', headers: { authorization } })
    expect(envoyDenied.status).toBe(403)
    expect(envoyDenied.headers.get('www-authenticate')).toContain('error="insufficient_scope"')
  })

  it('refuses a request described twice, or badly, with 400', async () => {
    const authorization = `Bearer ${await token()}`
    const refusals: Array<Record<string, string>> = [
      // Both forms: a client's X-Forwarded-Uri passed on beside the proxy's X-Original-*.
      { 'x-original-method': 'GET', 'x-original-uri': '/public/x', 'x-forwarded-uri': '/orders/1', 'x-forwarded-method': 'GET' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/x', 'x-forwarded-uri': '/orders/1' },
      // Two targets that disagree.
      { 'x-original-method': 'GET', 'x-original-url': 'https://shop.example/orders/1', 'x-original-uri': '/public/x' },
      // Incomplete or malformed.
      { 'x-original-uri': '/public/x' },
      { 'x-original-method': 'GET' },
      { 'x-forwarded-method': 'GET' },
      { 'x-forwarded-uri': '/public/x' },
      { 'x-original-method': 'get', 'x-original-uri': '/public/x' },
      { 'x-original-method': 'GET /public/x HTTP/1.1', 'x-original-uri': '/public/x' },
      { 'x-original-method': 'GET', 'x-original-uri': 'public/x' },
      { 'x-original-method': 'GET', 'x-original-uri': 'http://evil.example/public/x' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/x#frag' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/x y' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/x\ty' },
      { 'x-original-method': 'GET', 'x-original-url': 'https://shop.example/public/x y' },
      { 'x-original-method': 'GET', 'x-original-url': 'https://shop.example#/public/x' },
      { 'x-original-method': 'GET', 'x-original-url': '/public/x' },
      { 'x-original-method': 'GET', 'x-original-url': 'ftp://shop.example/public/x' },
      // ingress-nginx builds X-Original-URL from the client's Host: a `?`, `#`, `@` or `/` there must not move the path.
      { 'x-original-method': 'GET', 'x-original-url': 'http://a?/orders/1' },
      { 'x-original-method': 'GET', 'x-original-url': 'http://a#/orders/1' },
      { 'x-original-method': 'GET', 'x-original-url': 'http://user@shop.example/orders/1' },
      { 'x-original-method': 'GET', 'x-original-url': 'https://shop.example' },
      { 'x-original-method': 'GET', 'x-original-url': 'https://shop.example?/orders/1' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/../orders/1' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/%2e%2e/orders/1' },
      { 'x-original-method': 'GET', 'x-original-uri': '/public/..%2forders/1' },
      {},
    ]
    for (const headers of refusals) {
      const response = await fetch(decide, { headers: { authorization, ...headers } })
      expect(response.status, JSON.stringify(headers)).toBe(400)
      expect(response.headers.get('cache-control')).toBe('no-store')
      expect(response.headers.get('x-auth-subject')).toBeNull()
    }
    // Envoy's form with a describing header as well.
    const envoy = await fetch(`${gateway.decisionUrl!}/envoy/public/x`, { headers: { 'x-original-uri': '/orders/1', 'x-original-method': 'GET' } })
    expect(envoy.status).toBe(400)
  })

  it('refuses a describing header sent twice, even with the same value', async () => {
    const port = Number(new URL(decide).port)
    for (const name of ['X-Original-URI', 'X-Original-Method', 'X-Forwarded-Uri', 'x-original-url']) {
      const lines = ['GET /decide HTTP/1.1', 'Host: x', 'X-Original-Method: GET', 'X-Original-URI: /public/x', `${name}: /public/x`, 'Connection: close', '', '']
      if (name === 'X-Forwarded-Uri') lines.splice(4, 1, 'X-Forwarded-Uri: /public/x', 'X-Forwarded-Uri: /public/x')
      const response = await rawRequest(port, lines.join('\r\n'))
      expect(response.status, name).toBe(400)
    }
  })

  it('answers 404 off the endpoint paths, and decides an upgrade like any request (a GET only)', async () => {
    expect((await fetch(`${gateway.decisionUrl!}/orders/1`)).status).toBe(404)
    expect((await fetch(`${gateway.decisionUrl!}/decide/x`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/public/x' } })).status).toBe(404)
    const port = Number(new URL(decide).port)
    const upgrade = (method: string, auth: string) => rawRequest(port, ['GET /decide HTTP/1.1', 'Host: x', `X-Original-Method: ${method}`,
      'X-Original-URI: /ws', 'Connection: Upgrade', 'Upgrade: websocket', auth, 'Connection: close', '', ''].join('\r\n'))
    const authorization = `Authorization: Bearer ${await token()}`
    expect((await upgrade('GET', authorization)).status).toBe(200)
    expect((await upgrade('GET', 'X-None: 1')).status).toBe(401)
    // The hole of issue 16: an upgrade by another method onto a route of that method.
    expect((await upgrade('POST', authorization)).status).toBe(400)
    expect((await rawRequest(port, ['GET /decide HTTP/1.1', 'Host: x', 'X-Original-Method: GET', 'X-Original-URI: /public/x',
      'Connection: Upgrade', 'Upgrade: h2c', 'Connection: close', '', ''].join('\r\n'))).status).toBe(400)
  })
})

describe('what a proxy may cache', () => {
  it('never past the token\'s exp', async () => {
    // exp is now: accepted within the issuer's clock skew, but not a whole second is left to cache it for.
    const response = await nginx('GET', '/orders/1', { authorization: `Bearer ${await token({}, 0)}` })
    expect(response.status).toBe(200)
    expect(response.headers.get('cache-control')).toBe('no-store')
  })

  it('never where the decision reads more than the token, method and URI: header conditions, rate limits', async () => {
    const authorization = `Bearer ${await token()}`
    const byHeader = await nginx('GET', '/h/x', { authorization, 'x-tenant-id': 'acme' })
    expect(byHeader.status).toBe(200)
    expect(byHeader.headers.get('cache-control')).toBe('no-store')
    expect((await nginx('GET', '/h/x', { authorization, 'x-tenant-id': 'other' })).status).toBe(403)
    const limited = await nginx('GET', '/limited/x', { authorization, 'x-forwarded-for': '198.51.100.7' })
    expect(limited.status).toBe(200)
    expect(limited.headers.get('cache-control')).toBe('no-store')
  })

  it('counts rate limits per client address as the proxy reports it (the last X-Forwarded-For entry)', async () => {
    const authorization = `Bearer ${await token()}`
    const from = (address: string) => nginx('GET', '/limited/y', { authorization, 'x-forwarded-for': `203.0.113.9, ${address}` })
    expect((await from('192.0.2.1')).status).toBe(200)
    expect((await from('192.0.2.1')).status).toBe(200)
    const third = await from('192.0.2.1')
    expect(third.status).toBe(429)
    expect(third.headers.get('cache-control')).toBe('no-store')
    // Another client behind the same proxy has its own budget.
    expect((await from('192.0.2.2')).status).toBe(200)
  })
})

describe('logs and metrics', () => {
  it('logs the described request, never the token or the secret, and counts decisions', async () => {
    const secret = await token({ sub: 'log-subject' })
    await nginx('GET', '/orders/logged?q=hidden', { authorization: `Bearer ${secret}` })
    const line = gateway.logs.map((text) => JSON.parse(text) as Record<string, unknown>).findLast((entry) => entry.path === '/orders/logged')
    expect(line).toMatchObject({ method: 'GET', route: 'orders-read', status: 200, decision: 'allowed' })
    const all = gateway.logs.join('\n')
    expect(all).not.toContain(secret)
    expect(all).not.toContain('hidden')
    const metrics = await gateway.app.metrics.registry.metrics()
    expect(metrics).toMatch(/portcullis_requests_total\{route="orders-read",method="GET",status="200",decision="allowed"[^}]*\} [1-9]/)
  })
})

describe('trust', () => {
  let ca: TestCa
  beforeAll(() => { ca = createTestCa() })
  afterAll(() => ca.remove())

  async function decisionGateway(decision: Record<string, unknown>) {
    return startGateway(config(decision))
  }

  it('refuses callers outside the trusted addresses with 403 untrusted_caller, before reading anything', async () => {
    const other = await decisionGateway({ trust: { addresses: ['10.0.0.0/8', 'fd00::/8', '::/64'] } })
    try {
      // ::/64 holds ::ffff:127.0.0.1 as node's BlockList sees it: IPv4 callers are checked against IPv4 ranges only.
      const response = await fetch(`${other.decisionUrl!}/decide`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/public/x' } })
      expect(response.status).toBe(403)
      expect(await response.json()).toMatchObject({ error: 'untrusted_caller' })
      expect(response.headers.get('www-authenticate')).toBeNull()
      expect(response.headers.get('cache-control')).toBe('no-store')
    } finally {
      await other.close()
    }
  })

  it('with a shared secret: exactly one copy of the right value', async () => {
    const other = await decisionGateway({ trust: { addresses: ['127.0.0.1'], secret: SECRET } })
    try {
      const ask = (extra: Record<string, string>) => fetch(`${other.decisionUrl!}/decide`,
        { headers: { 'x-original-method': 'GET', 'x-original-uri': '/public/x', ...extra } })
      expect((await ask({})).status).toBe(403)
      expect((await ask({ 'x-portcullis-decision-secret': `${SECRET}x` })).status).toBe(403)
      expect((await ask({ 'x-portcullis-decision-secret': SECRET.slice(1) })).status).toBe(403)
      expect((await ask({ 'x-portcullis-decision-secret': SECRET })).status).toBe(200)
      const port = Number(new URL(other.decisionUrl!).port)
      const twice = await rawRequest(port, ['GET /decide HTTP/1.1', 'Host: x', 'X-Original-Method: GET', 'X-Original-URI: /public/x',
        `X-Portcullis-Decision-Secret: ${SECRET}`, 'X-Portcullis-Decision-Secret: guess', 'Connection: close', '', ''].join('\r\n'))
      expect(twice.status).toBe(403)
      expect(other.logs.join('\n')).not.toContain(SECRET)
    } finally {
      await other.close()
    }
  })

  it('with client certificates: the handshake refuses none, a name outside the list is 403', async () => {
    const server = ca.issue('decision', ['IP:127.0.0.1'])
    const proxy = ca.issue('nginx.internal', ['DNS:nginx.internal'])
    const stranger = ca.issue('someone-else', ['DNS:someone-else'])
    // The name in the CN only: a certificate with DNS names is known by those (RFC 6125 §6.4.4).
    const cnOnly = ca.issue('nginx.internal', ['DNS:someone-else'])
    const other = await decisionGateway({
      tls: { cert_file: server.certFile, key_file: server.keyFile, client_ca_file: ca.caFile },
      trust: { client_certificate_names: ['nginx.internal'] },
    })
    const ask = (cert?: { cert: string; key: string }) => new Promise<number>((resolve, reject) => {
      const req = httpsRequest(`${other.decisionUrl!}/decide`, {
        ca: ca.ca, ...cert, headers: { 'x-original-method': 'GET', 'x-original-uri': '/public/x' },
      }, (res) => { res.resume(); resolve(res.statusCode!) })
      req.on('error', reject)
      req.end()
    })
    try {
      expect(await ask(proxy)).toBe(200)
      expect(await ask(stranger)).toBe(403)
      expect(await ask(cnOnly)).toBe(403)
      await expect(ask()).rejects.toThrow()
    } finally {
      await other.close()
    }
  })

  it('refuses configs that trust nothing, or trust badly', () => {
    const base = { upstreams: { main: { url: 'http://127.0.0.1:9' } }, routes: [{ id: 'a', path: '/**', upstream: 'main', auth: 'none' }] }
    const problems = (decision: Record<string, unknown>) => configProblems(stringify({ ...base, decision: { listen: '127.0.0.1:8181', ...decision } }))
    expect(problems({})).toEqual([])
    expect(problems({ trust: {} })).toEqual([expect.stringContaining('decision.trust: names no trusted source')])
    expect(problems({ trust: { addresses: ['10.0.0.0/33', 'example.com', '10.0.0.1'] } })).toEqual([
      expect.stringContaining('decision.trust.addresses[0]: 10.0.0.0/33 is not'),
      expect.stringContaining('decision.trust.addresses[1]: example.com is not'),
    ])
    expect(problems({ trust: { secret: 'short' } })).toEqual([expect.stringContaining('decision.trust.secret: must NOT have fewer than 32 characters')])
    expect(problems({ trust: { addresses: ['10.0.0.0/8'], secret_header: 'X-S' } })).toEqual([expect.stringContaining('decision.trust.secret_header')])
    expect(problems({ trust: { client_certificate_names: ['nginx'] } })).toEqual(expect.arrayContaining([expect.stringContaining('needs decision.tls.client_ca_file')]))
    expect(problems({ cache_ttl: '10m' })).toEqual([expect.stringContaining('decision.cache_ttl: must be whole seconds, at most 5m')])
    expect(problems({ cache_ttl: '1500ms' })).toEqual([expect.stringContaining('decision.cache_ttl')])
    expect(problems({ listen: '127.0.0.1:8080' })).toEqual([expect.stringContaining('decision.listen: is server.listen too')])
  })
})

describe('reload', () => {
  it('applies a new trust and cache_ttl to the running listener', async () => {
    const running = await startGateway(config({}))
    try {
      const ask = () => fetch(`${running.decisionUrl!}/decide`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/public/x' } })
      expect((await ask()).headers.get('cache-control')).toBe('s-maxage=1')
      const next = loadConfig('portcullis.yaml', stringify(config({ trust: { addresses: ['10.0.0.0/8'] } })), {})
      expect(await running.app.gateway.applyConfig(next)).toEqual([])
      const refused = await ask()
      expect(refused.status).toBe(403)
      const again = loadConfig('portcullis.yaml', stringify(config({ cache_ttl: '0s' })), {})
      expect(await running.app.gateway.applyConfig(again)).toEqual([])
      expect((await ask()).headers.get('cache-control')).toBe('no-store')
      const moved = loadConfig('portcullis.yaml', stringify(config({ listen: '127.0.0.1:1' })), {})
      expect(await running.app.gateway.applyConfig(moved)).toEqual(['decision.listen, decision.tls'])
    } finally {
      await running.close()
    }
  })

  it('does not read a body sent to it, and closes that connection after the answer', async () => {
    const port = Number(new URL(decide).port)
    const response = await rawRequest(port, ['POST /decide HTTP/1.1', 'Host: x', 'X-Original-Method: GET', 'X-Original-URI: /public/x',
      'Content-Length: 100000', '', 'partial'].join('\r\n'))
    expect(response.status).toBe(200)
    expect(response.headers.toLowerCase()).toContain('connection: close')
  })
})

describe('cache_ttl', () => {
  it('0s makes every decision no-store; a longer bound is capped by exp', async () => {
    const off = await startGateway(config({ cache_ttl: '0s' }))
    const long = await startGateway(config({ cache_ttl: '5m' }))
    try {
      const headers = { authorization: `Bearer ${await token({}, 60)}`, 'x-original-method': 'GET', 'x-original-uri': '/orders/1' }
      const none = await fetch(`${off.decisionUrl!}/decide`, { headers })
      expect(none.status).toBe(200)
      expect(none.headers.get('cache-control')).toBe('no-store')
      expect(none.headers.get('x-accel-expires')).toBeNull()
      const capped = await fetch(`${long.decisionUrl!}/decide`, { headers })
      const seconds = Number(/^s-maxage=(\d+)$/.exec(capped.headers.get('cache-control') ?? '')?.[1])
      expect(seconds).toBeGreaterThanOrEqual(58)
      expect(seconds).toBeLessThanOrEqual(60)
    } finally {
      await Promise.all([off.close(), long.close()])
    }
  })
})

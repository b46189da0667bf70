import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { startRecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { rawRequest, startGateway, type RunningGateway } from '../support/gateway.js'

type Route = Record<string, unknown>

/** A gateway whose routes point at one recording upstream per name, so each test sees which route won. */
async function startRouting(names: string[], routes: Route[], issuer?: TestIssuer) {
  const upstreams = Object.fromEntries(await Promise.all(names.map(async (name) => [name, await startRecordingUpstream()] as const)))
  const gateway = await startGateway({
    upstreams: Object.fromEntries(names.map((name) => [name, { url: upstreams[name]!.url, timeout: '2s' }])),
    ...(issuer && {
      issuers: [{ issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }],
    }),
    routes,
    log: { level: 'silent' },
  })
  const close = async () => {
    await gateway.close()
    await Promise.all(Object.values(upstreams).map((upstream) => upstream.close()))
  }
  const received = () => Object.fromEntries(names.map((name) => [name, upstreams[name]!.requests.map((r) => `${r.method} ${r.url}`)]))
  const forget = () => { for (const upstream of Object.values(upstreams)) upstream.requests.length = 0 }
  return { gateway, upstreams, close, received, forget }
}

/** One HTTP/1.1 request sent byte for byte, for targets fetch() would normalise. */
function raw(gateway: RunningGateway, target: string, method = 'GET', headers = '') {
  return rawRequest(gateway.port, `${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers}Connection: close\r\n\r\n`)
}

function header(head: string, name: string): string | undefined {
  return new RegExp(`^${name}: (.*)$`, 'im').exec(head)?.[1]
}

describe('route selection', () => {
  it('sends each path to its most specific route: literal, then "*", then "**"', async ({ onTestFinished }) => {
    const { gateway, close, received } = await startRouting(['literal', 'star', 'glob'], [
      { id: 'glob', path: '/a/**', upstream: 'glob', auth: 'none' },
      { id: 'star', path: '/a/*', upstream: 'star', auth: 'none' },
      { id: 'literal', path: '/a/b', upstream: 'literal', auth: 'none' },
    ])
    onTestFinished(close)
    for (const path of ['/a/b', '/a/c', '/a/c/d', '/a', '/a/']) {
      expect((await fetch(gateway.url + path)).status, path).toBe(200)
    }
    expect(received()).toEqual({
      literal: ['GET /a/b'],
      star: ['GET /a/c'],
      glob: ['GET /a/c/d', 'GET /a', 'GET /a/'],
    })
  })

  it('compares segments left to right, so a literal first segment beats a later one', async ({ onTestFinished }) => {
    const { gateway, close, received } = await startRouting(['first', 'second'], [
      { id: 'second', path: '/*/b', upstream: 'second', auth: 'none' },
      { id: 'first', path: '/a/**', upstream: 'first', auth: 'none' },
    ])
    onTestFinished(close)
    await fetch(`${gateway.url}/a/b`)
    await fetch(`${gateway.url}/x/b`)
    expect(received()).toEqual({ first: ['GET /a/b'], second: ['GET /x/b'] })
  })

  it('prefers a route with a method list over an all-methods route on the same path', async ({ onTestFinished }) => {
    const { gateway, close, received } = await startRouting(['reads', 'rest'], [
      { id: 'rest', path: '/items/*', upstream: 'rest', auth: 'none' },
      { id: 'reads', path: '/items/*', methods: ['GET', 'HEAD'], upstream: 'reads', auth: 'none' },
    ])
    onTestFinished(close)
    for (const method of ['GET', 'HEAD', 'DELETE', 'POST']) {
      expect((await fetch(`${gateway.url}/items/1`, { method })).status, method).toBe(200)
    }
    expect(received()).toEqual({ reads: ['GET /items/1', 'HEAD /items/1'], rest: ['DELETE /items/1', 'POST /items/1'] })
  })

  it('lets "**" match zero segments, one, or many', async ({ onTestFinished }) => {
    const { gateway, close, received } = await startRouting(['files'], [{ id: 'files', path: '/files/**', upstream: 'files', auth: 'none' }])
    onTestFinished(close)
    for (const path of ['/files', '/files/', '/files/a', '/files/a/b/c']) await fetch(gateway.url + path)
    expect(received()).toEqual({ files: ['GET /files', 'GET /files/', 'GET /files/a', 'GET /files/a/b/c'] })
  })
})

describe('unmatched paths and methods', () => {
  let routing: Awaited<ReturnType<typeof startRouting>>
  beforeAll(async () => {
    routing = await startRouting(['orders'], [
      { id: 'orders-read', path: '/orders/*', methods: ['GET', 'HEAD'], upstream: 'orders', auth: 'required' },
      { id: 'orders-create', path: '/orders/**', methods: ['POST'], upstream: 'orders', auth: 'required' },
      { id: 'health', path: '/health', methods: ['GET'], upstream: 'orders', auth: 'none' },
    ])
  })
  afterAll(() => routing.close())
  beforeEach(() => routing.forget())

  it('answers 404 JSON for a path no route matches, before any token is asked for, forwarding nothing', async () => {
    const res = await fetch(`${routing.gateway.url}/nowhere`, { method: 'POST', body: 'payload' })
    expect(res.status).toBe(404)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(res.headers.get('www-authenticate')).toBeNull()
    expect(await res.json()).toEqual({ error: 'not_found', error_description: 'no route matches this path' })
    expect(routing.received()).toEqual({ orders: [] })
  })

  it('answers 404 for a path that only shares a prefix with a route', async () => {
    expect((await fetch(`${routing.gateway.url}/ordersx/1`)).status).toBe(404)
    expect((await fetch(`${routing.gateway.url}/health/x`)).status).toBe(404)
    expect(routing.received()).toEqual({ orders: [] })
  })

  it('answers 405 with an Allow header listing every method the path accepts, before any token is asked for', async () => {
    const res = await fetch(`${routing.gateway.url}/orders/1`, { method: 'DELETE' })
    expect(res.status).toBe(405)
    expect(res.headers.get('allow')!.split(', ').sort()).toEqual(['GET', 'HEAD', 'POST'])
    expect(res.headers.get('www-authenticate')).toBeNull()
    expect(await res.json()).toEqual({ error: 'method_not_allowed', error_description: 'this path does not accept this method' })
    expect(routing.received()).toEqual({ orders: [] })
  })

  it('lists only the methods of the routes that match this path in Allow', async () => {
    const deeper = await fetch(`${routing.gateway.url}/orders/1/items`, { method: 'GET' })
    expect(deeper.status).toBe(405)
    expect(deeper.headers.get('allow')).toBe('POST')
    const health = await fetch(`${routing.gateway.url}/health`, { method: 'POST' })
    expect(health.status).toBe(405)
    expect(health.headers.get('allow')).toBe('GET')
    expect(routing.received()).toEqual({ orders: [] })
  })

  it('still asks for a token on a matched path and method (the control for the cases above)', async () => {
    const res = await fetch(`${routing.gateway.url}/orders/1`)
    expect(res.status).toBe(401)
    expect((await fetch(`${routing.gateway.url}/health`)).status).toBe(200)
    expect(routing.received()).toEqual({ orders: ['GET /health'] })
  })
})

describe('what the upstream receives', () => {
  let routing: Awaited<ReturnType<typeof startRouting>>
  beforeAll(async () => {
    routing = await startRouting(['main'], [{ id: 'all', path: '/**', upstream: 'main', auth: 'none' }])
  })
  afterAll(() => routing.close())
  beforeEach(() => routing.forget())

  it('passes the query string through untouched, repeated and valueless keys included', async () => {
    const res = await fetch(`${routing.gateway.url}/search?a=%2F&b=1&b=2&c`)
    expect(res.status).toBe(200)
    expect(routing.received()).toEqual({ main: ['GET /search?a=%2F&b=1&b=2&c'] })
  })

  it('passes a query string byte for byte, even with what the path may not carry', async () => {
    const target = "/q?x=../..%2F%2e%2e&n=%00&s=a+b;c&&=&e=%zz&u=%C3%a9&raw=<>{}|^`'\"&p=%2561&empty="
    const res = await raw(routing.gateway, target)
    expect(res.status).toBe(200)
    expect(routing.received()).toEqual({ main: [`GET ${target}`] })
  })

  it('forwards the path byte for byte, escapes and sub-delims as sent', async () => {
    const paths = [
      '/a%20b/%E2%82%AC/%e2%82%ac',
      "/x:y@z!$&'()*+,=",
      '/users/alice%40example.com/100%25',
      '/things%3Adelete/%3a',
      '/trailing/',
      '/',
    ]
    for (const path of paths) expect((await raw(routing.gateway, path)).status, path).toBe(200)
    expect(routing.received()).toEqual({ main: paths.map((path) => `GET ${path}`) })
  })

  it('keeps an empty query "?" as sent', async () => {
    await raw(routing.gateway, '/p?')
    expect(routing.received()).toEqual({ main: ['GET /p?'] })
  })
})

// Every trick a catch-all `auth: none` route would otherwise forward, so a miss shows as a 200.
const PATH_TRICKS: Array<[string, string, string?]> = [
  ['a raw dot-dot segment', '/public/../admin'],
  ['a raw dot segment', '/a/./b'],
  ['a trailing dot-dot segment', '/public/..'],
  ['an encoded dot-dot segment', '/public/%2e%2e/admin'],
  ['an encoded dot-dot segment in mixed case', '/public/%2E%2e/admin'],
  ['a half-encoded dot-dot segment', '/public/.%2e/admin'],
  ['an encoded dot segment', '/public/%2e/admin'],
  ['an encoded slash', '/public%2fadmin'],
  ['an encoded slash in upper case', '/public%2Fadmin'],
  ['an encoded backslash', '/public%5cadmin'],
  ['a raw backslash', '/public\\..\\admin'],
  ['an encoded NUL', '/admin%00.json'],
  ['a raw NUL', '/admin\u0000.json'],
  ['an empty segment', '/public//admin'],
  ['a leading empty segment', '//admin'],
  ['a Tomcat dot-dot path parameter', '/public/..;/admin'],
  ['a path parameter', '/admin;jsessionid=1/secret'],
  ['an encoded semicolon', '/admin%3B/secret'],
  ['an encoded unreserved letter', '/%61dmin/secret'],
  ['an encoded unreserved letter in lower case', '/adm%69n/secret'],
  ['an encoded tilde', '/%7Eadmin'],
  ['a broken escape', '/admin%g1'],
  ['a raw fragment', '/admin#x'],
  ['a raw tab', '/admin\tx'],
  ['absolute-form', 'http://127.0.0.1/admin/secret'],
  ['absolute-form for another host', 'http://example.com/admin/secret'],
  ['asterisk-form', '*', 'OPTIONS'],
  ['authority-form with GET', '127.0.0.1:80'],
]

describe('path hygiene', () => {
  let routing: Awaited<ReturnType<typeof startRouting>>
  beforeAll(async () => {
    routing = await startRouting(['main'], [{ id: 'all', path: '/**', upstream: 'main', auth: 'none' }])
  })
  afterAll(() => routing.close())
  beforeEach(() => routing.forget())

  it.each(PATH_TRICKS)('answers 400 invalid_request to %s (%s) and never reaches the upstream', async (_what, target, method) => {
    const res = await raw(routing.gateway, target, method)
    expect(res.status).toBe(400)
    expect(header(res.headers, 'content-type')).toMatch(/^application\/json/)
    expect(JSON.parse(res.body)).toMatchObject({ error: 'invalid_request' })
    expect(routing.received()).toEqual({ main: [] })
  })

  it('answers a CONNECT (authority-form) request with 400 invalid_request JSON and opens no tunnel', async () => {
    const res = await raw(routing.gateway, '127.0.0.1:80', 'CONNECT')
    expect(res.status).toBe(400)
    expect(header(res.headers, 'www-authenticate')).toBeUndefined()
    expect(JSON.parse(res.body)).toMatchObject({ error: 'invalid_request' })
    expect(routing.received()).toEqual({ main: [] })
  })

  it('answers 400 to a path trick without a Bearer challenge: it is not about the token', async () => {
    const res = await raw(routing.gateway, '/public/../admin')
    expect(res.status).toBe(400)
    expect(header(res.headers, 'www-authenticate')).toBeUndefined()
  })

  it('answers 405 to a method no route can name (TRACE, PROPFIND), even on an all-methods route, forwarding nothing', async () => {
    for (const method of ['TRACE', 'PROPFIND']) {
      const res = await raw(routing.gateway, '/public/admin', method)
      expect(res.status).toBe(405)
      expect(header(res.headers, 'allow')!.split(', ').sort()).toEqual(['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT'])
      expect(JSON.parse(res.body)).toMatchObject({ error: 'method_not_allowed' })
    }
    expect(routing.received()).toEqual({ main: [] })
  })

  it('forwards the same catch-all a clean path (the control for the cases above)', async () => {
    const res = await raw(routing.gateway, '/public/admin')
    expect(res.status).toBe(200)
    expect(routing.received()).toEqual({ main: ['GET /public/admin'] })
  })
})

describe('a protected route beside a public catch-all', () => {
  let routing: Awaited<ReturnType<typeof startRouting>>
  let issuer: TestIssuer
  beforeAll(async () => {
    issuer = await startTestIssuer()
    routing = await startRouting(['admin', 'public'], [
      { id: 'admin', path: '/admin/**', upstream: 'admin', auth: 'required', scopes: { all: ['admin'] } },
      { id: 'custom-method', path: '/v1/things:purge', upstream: 'admin', auth: 'required', scopes: { all: ['admin'] } },
      { id: 'public', path: '/**', upstream: 'public', auth: 'none' },
    ], issuer)
  })
  afterAll(async () => { await routing.close(); await issuer.close() })
  beforeEach(() => routing.forget())

  it('protects the admin route and serves the public one (the control)', async () => {
    expect((await raw(routing.gateway, '/admin/secret')).status).toBe(401)
    expect((await raw(routing.gateway, '/admin')).status).toBe(401)
    expect((await raw(routing.gateway, '/administrator')).status).toBe(200)
    const token = await issuer.sign({ scope: 'admin' })
    expect((await raw(routing.gateway, '/admin/secret', 'GET', `Authorization: Bearer ${token}\r\n`)).status).toBe(200)
    expect(routing.received()).toEqual({ admin: ['GET /admin/secret'], public: ['GET /administrator'] })
  })

  it.each([
    '/public/../admin/secret',
    '/public/%2e%2e/admin/secret',
    '/public/.%2E/admin/secret',
    '/public/..;/admin/secret',
    '/public%2f..%2fadmin/secret',
    '/public%2F%2E%2E%2Fadmin/secret',
    '/public\\..\\admin/secret',
    '/%61dmin/secret',
    '/admin;x/secret',
    '/admin;/secret',
    '/admin%3b/secret',
    '//admin/secret',
    '/./admin/secret',
    '/admin%00/secret',
    'http://127.0.0.1/admin/secret',
  ])('refuses %s with 400 rather than serving it as public', async (target) => {
    const res = await raw(routing.gateway, target)
    expect(res.status).toBe(400)
    expect(JSON.parse(res.body)).toMatchObject({ error: 'invalid_request' })
    expect(routing.received()).toEqual({ admin: [], public: [] })
  })

  it.each(['/v1/things%3Apurge', '/v1/things%3apurge'])(
    'treats %s, which upstreams decode to the protected path, as the protected route', async (target) => {
      expect((await raw(routing.gateway, target, 'POST', 'Content-Length: 0\r\n')).status).toBe(401)
      expect(routing.received()).toEqual({ admin: [], public: [] })
    })
})

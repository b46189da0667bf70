/**
 * Scopes (`scope` / `scp` per scope_claim, scopes.all / scopes.any) and auth modes (required, optional,
 * none) end to end. Every rejection asserts the status, the exact challenge, the JSON body and that
 * nothing reached the upstream.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it, type TestContext } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

interface Harness {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
}

const ROUTES = [
  { id: 'read', path: '/read/**', upstream: 'main', scopes: { all: ['orders:read'] } },
  { id: 'write', path: '/write/**', upstream: 'main', scopes: { all: ['orders:read', 'orders:write'] } },
  { id: 'any', path: '/any/**', upstream: 'main', scopes: { any: ['orders:admin', 'orders:write'] } },
  { id: 'both', path: '/both/**', upstream: 'main', scopes: { all: ['orders:read'], any: ['eu', 'us'] } },
  { id: 'plain', path: '/plain/**', upstream: 'main', auth: 'required' },
  { id: 'optional', path: '/optional/**', upstream: 'main', auth: 'optional' },
  { id: 'optional-scoped', path: '/optional-scoped/**', upstream: 'main', auth: 'optional', scopes: { all: ['orders:read'] } },
  { id: 'public', path: '/public/**', upstream: 'main', auth: 'none' },
]

async function boot(issuerExtra?: Record<string, unknown>): Promise<Harness> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const gateway = await startGateway(testConfig({ upstream, issuer, routes: ROUTES, ...(issuerExtra && { issuerExtra }) }))
  return { upstream, issuer, gateway }
}

async function shutdown({ upstream, issuer, gateway }: Harness): Promise<void> {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
}

async function start(context: TestContext, issuerExtra: Record<string, unknown>): Promise<Harness> {
  const harness = await boot(issuerExtra)
  context.onTestFinished(() => shutdown(harness))
  return harness
}

let shared: Harness
beforeAll(async () => { shared = await boot() })
afterAll(() => shutdown(shared))
beforeEach(() => {
  shared.upstream.requests.length = 0
  shared.gateway.logs.length = 0
})

const SPOOFED = { 'x-auth-subject': 'admin', 'x-auth-client-id': 'root', 'x-auth-scopes': 'orders:admin', 'x-auth-issuer': 'https://evil.example' }
const INVALID_TOKEN_CHALLENGE = 'Bearer realm="test", error="invalid_token", error_description="the access token is invalid or expired"'
const insufficientScopeChallenge = (scope: string) =>
  `Bearer realm="test", error="insufficient_scope", error_description="the access token lacks a required scope", scope="${scope}"`

function get(harness: Harness, path: string, token?: string, extra: Record<string, string> = {}): Promise<Response> {
  return fetch(`${harness.gateway.url}${path}`, { headers: { ...extra, ...(token !== undefined && { authorization: `Bearer ${token}` }) } })
}

function deniedReasons(gateway: RunningGateway): unknown[] {
  return gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown })
    .filter((entry) => entry.msg === 'request denied').map((entry) => entry.reason)
}

async function expectForbidden(harness: Harness, res: Response, scope: string, reason: string): Promise<void> {
  expect(res.status).toBe(403)
  expect(res.headers.get('www-authenticate')).toBe(insufficientScopeChallenge(scope))
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
  expect(await res.json()).toEqual({ error: 'insufficient_scope', error_description: 'the access token lacks a required scope' })
  expect(harness.upstream.requests).toHaveLength(0)
  expect(deniedReasons(harness.gateway)).toEqual([reason])
}

async function expectInvalidToken(harness: Harness, res: Response, reason: string): Promise<void> {
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
  expect(await res.json()).toEqual({ error: 'invalid_token', error_description: 'the access token is invalid or expired' })
  expect(harness.upstream.requests).toHaveLength(0)
  expect(deniedReasons(harness.gateway)).toEqual([reason])
}

/** The forwarded request, after asserting there was exactly one. */
async function forwarded(harness: Harness, res: Response) {
  expect(res.status).toBe(200)
  expect(harness.upstream.requests).toHaveLength(1)
  const request = harness.upstream.requests[0]!
  harness.upstream.requests.length = 0
  return request
}

describe('scopes.all', () => {
  it('forwards when the space-delimited scope claim has every required scope, with X-Auth-Scopes', async () => {
    const res = await get(shared, '/write/1', await shared.issuer.sign({ scope: 'orders:read profile orders:write' }))
    const request = await forwarded(shared, res)
    expect(request.headers['x-auth-scopes']).toBe('orders:read profile orders:write')
    expect(request.headers['x-auth-subject']).toBe('user-1')
    expect(request.headers['x-auth-client-id']).toBe('client-1')
    expect(request.headers['x-auth-issuer']).toBe(shared.issuer.issuer)
  })

  it('answers 403 insufficient_scope naming every required scope when one is missing', async () => {
    const res = await get(shared, '/write/1', await shared.issuer.sign({ scope: 'orders:read' }))
    await expectForbidden(shared, res, 'orders:read orders:write', 'missing orders:write')
  })

  it('answers 403 for a token with no scope claim at all', async () => {
    const res = await get(shared, '/read/1', await shared.issuer.sign())
    await expectForbidden(shared, res, 'orders:read', 'missing orders:read')
  })

  it('compares scopes exactly: no prefix, substring or case folding', async () => {
    for (const scope of ['orders:readonly', 'orders', 'ORDERS:READ', 'xorders:read', 'orders:read:all']) {
      shared.gateway.logs.length = 0
      const res = await get(shared, '/read/1', await shared.issuer.sign({ scope }))
      await expectForbidden(shared, res, 'orders:read', 'missing orders:read')
    }
  })

  it('tolerates repeated spaces in the scope string', async () => {
    const res = await get(shared, '/read/1', await shared.issuer.sign({ scope: '  profile   orders:read ' }))
    expect((await forwarded(shared, res)).headers['x-auth-scopes']).toBe('profile orders:read')
  })

  it('needs no scope on a required route without scopes, and forwards an empty X-Auth-Scopes', async () => {
    const res = await get(shared, '/plain/1', await shared.issuer.sign())
    expect((await forwarded(shared, res)).headers['x-auth-scopes']).toBe('')
  })
})

describe('scopes.any', () => {
  it('forwards when one of the listed scopes is granted', async () => {
    for (const scope of ['orders:write', 'orders:admin', 'orders:read orders:admin orders:write']) {
      await forwarded(shared, await get(shared, '/any/1', await shared.issuer.sign({ scope })))
    }
  })

  it('answers 403 insufficient_scope listing the alternatives when none is granted', async () => {
    const res = await get(shared, '/any/1', await shared.issuer.sign({ scope: 'orders:read' }))
    await expectForbidden(shared, res, 'orders:admin orders:write', 'none of orders:admin orders:write')
  })

  it('enforces all and any together', async () => {
    await forwarded(shared, await get(shared, '/both/1', await shared.issuer.sign({ scope: 'orders:read us' })))
    const noAll = await get(shared, '/both/1', await shared.issuer.sign({ scope: 'eu us' }))
    await expectForbidden(shared, noAll, 'orders:read', 'missing orders:read')
    shared.gateway.logs.length = 0
    const noAny = await get(shared, '/both/1', await shared.issuer.sign({ scope: 'orders:read' }))
    await expectForbidden(shared, noAny, 'eu us', 'none of eu us')
  })
})

describe('scope_claim', () => {
  it('reads scope, then scp (array or string), when scope_claim is not set', async () => {
    await forwarded(shared, await get(shared, '/read/1', await shared.issuer.sign({ scp: ['orders:read', 'profile'] })))
    const request = await forwarded(shared, await get(shared, '/read/1', await shared.issuer.sign({ scp: 'profile orders:read' })))
    expect(request.headers['x-auth-scopes']).toBe('profile orders:read')
  })

  it('reads only scp when scope_claim is scp: an array, or a space-delimited string', async (context) => {
    const harness = await start(context, { scope_claim: 'scp' })
    const fromArray = await forwarded(harness, await get(harness, '/write/1', await harness.issuer.sign({ scp: ['orders:read', 'orders:write'] })))
    expect(fromArray.headers['x-auth-scopes']).toBe('orders:read orders:write')
    await forwarded(harness, await get(harness, '/write/1', await harness.issuer.sign({ scp: 'orders:read orders:write' })))
    // The `scope` claim is not looked at.
    const res = await get(harness, '/read/1', await harness.issuer.sign({ scope: 'orders:read' }))
    await expectForbidden(harness, res, 'orders:read', 'missing orders:read')
  })

  it('reads only scope when scope_claim is scope', async (context) => {
    const harness = await start(context, { scope_claim: 'scope' })
    await forwarded(harness, await get(harness, '/read/1', await harness.issuer.sign({ scope: 'orders:read', scp: ['nothing'] })))
    const res = await get(harness, '/read/1', await harness.issuer.sign({ scp: ['orders:read'] }))
    await expectForbidden(harness, res, 'orders:read', 'missing orders:read')
  })

  it('answers 401 invalid_token to a scope claim that is a JSON array (RFC 9068 §2.2.3, issue 16), unless scope_claim is scope_array', async (context) => {
    for (const harness of [shared, await start(context, { scope_claim: 'scope' })]) {
      harness.gateway.logs.length = 0
      const res = await get(harness, '/read/1', await harness.issuer.sign({ scope: ['orders:read'] }))
      await expectInvalidToken(harness, res, 'bad_scope_claim')
    }
    const arrays = await start(context, { scope_claim: 'scope_array' })
    await forwarded(arrays, await get(arrays, '/read/1', await arrays.issuer.sign({ scope: ['orders:read'] })))
    await forwarded(arrays, await get(arrays, '/read/1', await arrays.issuer.sign({ scope: 'orders:read' })))
  })

  it('answers 401 invalid_token for a malformed scope claim', async () => {
    const malformed: Record<string, unknown>[] = [
      { scope: 42 },
      { scope: { 'orders:read': true } },
      { scp: ['orders:read', 7] },
      // One array member with a space would read as two scopes in X-Auth-Scopes upstream.
      { scp: ['orders:read orders:admin'] },
      { scp: [''] },
      { scope: 'orders:read "quoted"' },
    ]
    for (const claims of malformed) {
      shared.gateway.logs.length = 0
      const res = await get(shared, '/plain/1', await shared.issuer.sign(claims))
      await expectInvalidToken(shared, res, 'bad_scope_claim')
    }
  })
})

describe('auth modes', () => {
  it('auth: required answers 401 with the bare challenge when no token is sent', async () => {
    const res = await get(shared, '/read/1', undefined, SPOOFED)
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="test"')
    expect(await res.json()).toEqual({ error: 'unauthorized', error_description: 'a Bearer access token is required' })
    expect(shared.upstream.requests).toHaveLength(0)
  })

  it('auth: optional forwards a request without a token and without identity headers, spoofed ones stripped', async () => {
    const request = await forwarded(shared, await get(shared, '/optional/1', undefined, SPOOFED))
    for (const name of Object.keys(SPOOFED)) expect(request.headers[name]).toBeUndefined()
  })

  it('auth: optional forwards a valid token with identity headers replacing spoofed ones', async () => {
    const request = await forwarded(shared, await get(shared, '/optional/1', await shared.issuer.sign({ scope: 'orders:read' }), SPOOFED))
    expect(request.headers['x-auth-subject']).toBe('user-1')
    expect(request.headers['x-auth-client-id']).toBe('client-1')
    expect(request.headers['x-auth-scopes']).toBe('orders:read')
    expect(request.headers['x-auth-issuer']).toBe(shared.issuer.issuer)
  })

  it('auth: optional answers 401 for an invalid token rather than forwarding anonymously', async () => {
    const res = await get(shared, '/optional/1', await shared.issuer.sign({ exp: Math.floor(Date.now() / 1000) - 600 }))
    await expectInvalidToken(shared, res, 'expired')
  })

  it('auth: optional answers 400 for a malformed header or a token in the query', async () => {
    for (const res of [await get(shared, '/optional/1', 'a b'), await fetch(`${shared.gateway.url}/optional/1?access_token=abc`)]) {
      expect(res.status).toBe(400)
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer realm="test", error="invalid_request", error_description="[^"]+"$/)
      expect((await res.json() as { error: string }).error).toBe('invalid_request')
    }
    expect(shared.upstream.requests).toHaveLength(0)
  })

  it('auth: optional still enforces the route scopes when a token is presented', async () => {
    const res = await get(shared, '/optional-scoped/1', await shared.issuer.sign({ scope: 'profile' }))
    await expectForbidden(shared, res, 'orders:read', 'missing orders:read')
  })

  it('auth: none forwards with or without a token, never validates it, and strips spoofed identity headers', async () => {
    for (const token of [undefined, 'not-a-jwt', await shared.issuer.sign({ exp: 1 })]) {
      const request = await forwarded(shared, await get(shared, '/public/1', token, SPOOFED))
      for (const name of Object.keys(SPOOFED)) expect(request.headers[name]).toBeUndefined()
    }
    expect(deniedReasons(shared.gateway)).toEqual([])
  })
})

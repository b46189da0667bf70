/**
 * RFC 6750 §2 Bearer extraction and §3 error rendering, end to end: the real gateway on loopback, a
 * recording upstream and a jose-signed issuer. Every rejection asserts the status, the exact challenge,
 * the JSON body and that nothing reached the upstream.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { Client } from 'undici'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { bootHarness, resetHarness, shutdownHarness, startHarness, type Harness } from '../support/harness.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { tokenHash } from '../../src/authn/token-cache.js'

// One default gateway for the whole file: every test starts with no recorded request and no log line.
let shared: Harness
beforeAll(async () => { shared = await bootHarness() })
afterAll(() => shutdownHarness(shared))
beforeEach(() => resetHarness(shared))

const NO_TOKEN_CHALLENGE = 'Bearer realm="test"'
const INVALID_TOKEN_CHALLENGE = 'Bearer realm="test", error="invalid_token", error_description="the access token is invalid or expired"'
const invalidRequestChallenge = (description: string) =>
  `Bearer realm="test", error="invalid_request", error_description="${description}"`

async function expectRejected(res: Response, upstream: RecordingUpstream, expected: {
  status: number
  challenge: string | null
  error: string
  description: string
}): Promise<void> {
  expect(res.status).toBe(expected.status)
  expect(res.headers.get('www-authenticate')).toBe(expected.challenge)
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
  expect(res.headers.get('cache-control')).toBe('no-store')
  expect(await res.json()).toEqual({ error: expected.error, error_description: expected.description })
  expect(upstream.requests).toHaveLength(0)
}

const noToken = { status: 401, challenge: NO_TOKEN_CHALLENGE, error: 'unauthorized', description: 'a Bearer access token is required' }
const invalidRequest = (description: string) =>
  ({ status: 400, challenge: invalidRequestChallenge(description), error: 'invalid_request', description })
const invalidToken = { status: 401, challenge: INVALID_TOKEN_CHALLENGE, error: 'invalid_token', description: 'the access token is invalid or expired' }

/** Parses a raw HTTP/1.1 response head into lower-cased header name → value. */
function headersOf(head: string): Map<string, string> {
  const map = new Map<string, string>()
  for (const line of head.split('\r\n').slice(1)) {
    const colon = line.indexOf(':')
    map.set(line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim())
  }
  return map
}

describe('Bearer extraction (RFC 6750 §2.1)', () => {
  it('answers 401 with a bare Bearer challenge and no error code when no token is sent', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`)
    await expectRejected(res, upstream, noToken)
  })

  it('treats Basic credentials as no Bearer credentials: 401 with the bare challenge', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Basic ${Buffer.from('alice:secret').toString('base64')}` } })
    await expectRejected(res, upstream, noToken)
  })

  it.for(['bearer', 'BEARER', 'BeArEr'])('accepts the scheme spelled %s (case-insensitive)', async (scheme) => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `${scheme} ${await issuer.sign()}` } })
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0]!.headers['x-auth-subject']).toBe('user-1')
  })

  it('accepts several spaces between the scheme and the token (RFC 7235 1*SP)', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer   ${await issuer.sign()}` } })
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })

  it('answers 400 invalid_request for "Bearer" with no token', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: 'Bearer' } })
    await expectRejected(res, upstream, invalidRequest('malformed Bearer credentials'))
  })

  it('answers 400 invalid_request for "Bearer " followed only by spaces', async () => {
    const { upstream, gateway } = shared
    const res = await rawRequest(gateway.port, 'GET /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer    \r\nConnection: close\r\n\r\n')
    expect(res.status).toBe(400)
    expect(headersOf(res.headers).get('www-authenticate')).toBe(invalidRequestChallenge('malformed Bearer credentials'))
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 400 invalid_request for two tokens in one header ("Bearer a b")', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: 'Bearer a b' } })
    await expectRejected(res, upstream, invalidRequest('malformed Bearer credentials'))
  })

  it.for([
    ['a dollar sign', 'abc$def'],
    ['a comma', 'abc,def'],
    ['quotes', '"abc"'],
    ['padding in the middle', 'abc=def'],
    ['an auth-param', 'token=abc'],
    ['a backslash', 'abc\\def'],
    ['a semicolon', 'abc;def'],
  ])('answers 400 invalid_request for a token with %s', async ([, token]) => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${token}` } })
    await expectRejected(res, upstream, invalidRequest('malformed Bearer credentials'))
  })

  it('answers 400 invalid_request for a tab between scheme and token', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: 'Bearer\tabc' } })
    await expectRejected(res, upstream, invalidRequest('malformed Authorization header'))
  })

  it('answers 400 invalid_request for two Authorization headers, even when both are valid', async () => {
    const { upstream, issuer, gateway } = shared
    const token = await issuer.sign()
    const res = await rawRequest(gateway.port,
      `GET /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
    expect(res.status).toBe(400)
    const headers = headersOf(res.headers)
    expect(headers.get('www-authenticate')).toBe(invalidRequestChallenge('more than one Authorization header'))
    expect(headers.get('content-type')).toBe('application/json; charset=utf-8')
    expect(JSON.parse(res.body)).toEqual({ error: 'invalid_request', error_description: 'more than one Authorization header' })
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 400 invalid_request for a Basic and a Bearer Authorization header together', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await rawRequest(gateway.port,
      `GET /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YTpi\r\nauthorization: Bearer ${await issuer.sign()}\r\nConnection: close\r\n\r\n`)
    expect(res.status).toBe(400)
    expect(headersOf(res.headers).get('www-authenticate')).toBe(invalidRequestChallenge('more than one Authorization header'))
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('tokens outside the Authorization header (RFC 6750 §2.2, §2.3)', () => {
  const queryDescription = 'access tokens in the query string are not accepted; use the Authorization header'
  const bodyDescription = 'access tokens in the request body are not accepted; use the Authorization header'

  it('answers 400 invalid_request for ?access_token= even with a valid Authorization header', async () => {
    const { upstream, issuer, gateway } = shared
    const token = await issuer.sign()
    const res = await fetch(`${gateway.url}/orders?access_token=${token}`, { headers: { authorization: `Bearer ${token}` } })
    await expectRejected(res, upstream, invalidRequest(queryDescription))
  })

  it.for([
    ['alone', '?access_token=abc'],
    ['after another parameter', '?a=1&access_token=abc'],
    ['with an empty value', '?access_token='],
    ['with no value', '?access_token'],
    ['percent-encoded in its name', '?access%5Ftoken=abc'],
    ['percent-encoded in its first letter', '?%61ccess_token=abc'],
  ])('answers 400 invalid_request for a query token %s', async ([, query]) => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders${query}`)
    await expectRejected(res, upstream, invalidRequest(queryDescription))
  })

  it('forwards a query that only mentions access_token as a value, untouched', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders?q=access_token&x=%41`, { headers: { authorization: `Bearer ${await issuer.sign()}` } })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.url).toBe('/orders?q=access_token&x=%41')
  })

  it('answers 400 invalid_request for access_token in a form body as well as the header', async () => {
    const { upstream, issuer, gateway } = shared
    const token = await issuer.sign()
    const res = await fetch(`${gateway.url}/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: `item=1&access_token=${token}`,
    })
    await expectRejected(res, upstream, invalidRequest(bodyDescription))
  })

  it('answers 401 without reading the body when the only token is in a form body (the header is the one method)', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `item=1&access_token=${await issuer.sign()}`,
    })
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="test"')
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 400 for a form body token whatever the content-type parameters and case', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await issuer.sign()}`, 'content-type': 'Application/X-WWW-Form-Urlencoded; charset=UTF-8' },
      body: 'access_token=abc',
    })
    await expectRejected(res, upstream, invalidRequest(bodyDescription))
  })

  it('answers 400 for a form body token whose name is percent-encoded', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await issuer.sign()}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'item=1&access%5Ftoken=abc',
    })
    await expectRejected(res, upstream, invalidRequest(bodyDescription))
  })

  it('forwards a form body without access_token intact', async () => {
    const { upstream, issuer, gateway } = shared
    const body = 'item=1&qty=2'
    const res = await fetch(`${gateway.url}/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await issuer.sign()}`, 'content-type': 'application/x-www-form-urlencoded' },
      body,
    })
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0]!.bodyBytes).toBe(body.length)
  })

  it('does not look for access_token in a JSON body', async () => {
    const { upstream, issuer, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await issuer.sign()}`, 'content-type': 'application/json' },
      body: JSON.stringify({ access_token: 'abc' }),
    })
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })
})

describe('size limits', () => {
  it('answers 400 invalid_request for a token one byte over 8 KiB', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${'a'.repeat(8 * 1024 + 1)}` } })
    await expectRejected(res, upstream, invalidRequest('the access token is too large'))
  })

  it('lets a token of exactly 8 KiB through extraction (then refused as not a JWT)', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${'a'.repeat(8 * 1024)}` } })
    await expectRejected(res, upstream, invalidToken)
    expect(gateway.logs.some((line) => line.includes('"reason":"no_introspecting_issuer"'))).toBe(true)
  })

  it('answers 400 for a 15 KiB token that still fits the header limit', async () => {
    const { upstream, gateway } = shared
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${'a'.repeat(15 * 1024)}` } })
    await expectRejected(res, upstream, invalidRequest('the access token is too large'))
  })

  it('honours server.max_token_size', async (context) => {
    const { upstream, gateway } = await startHarness(context, { server: { max_token_size: '1kb' } })
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${'a'.repeat(1025)}` } })
    await expectRejected(res, upstream, invalidRequest('the access token is too large'))
  })

  it('answers 431 JSON for headers over 16 KiB and keeps serving', async () => {
    const { upstream, issuer, gateway } = shared
    const huge = 'a'.repeat(17 * 1024)
    const res = await rawRequest(gateway.port, `GET /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${huge}\r\n\r\n`)
    expect(res.status).toBe(431)
    const headers = headersOf(res.headers)
    expect(headers.get('content-type')).toBe('application/json; charset=utf-8')
    expect(headers.get('www-authenticate')).toBeUndefined()
    expect(JSON.parse(res.body)).toEqual({ error: 'headers_too_large', error_description: 'the request headers are too large' })
    // Many small headers add up the same way.
    const many = Array.from({ length: 400 }, (_, i) => `X-Filler-${i}: ${'b'.repeat(40)}\r\n`).join('')
    const res2 = await rawRequest(gateway.port, `GET /orders HTTP/1.1\r\nHost: x\r\n${many}\r\n`)
    expect(res2.status).toBe(431)
    expect(upstream.requests).toHaveLength(0)
    expect(gateway.logs.join('')).not.toContain(huge)
    // The gateway is still up.
    const ok = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${await issuer.sign()}` } })
    expect(ok.status).toBe(200)
  })
})

describe('what is logged', () => {
  it('logs the precise reason of a rejection but never the token', async () => {
    const { upstream, issuer, gateway } = shared
    const good = await issuer.sign()
    const expired = await issuer.sign({ exp: Math.floor(Date.now() / 1000) - 3600 })
    expect((await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${good}` } })).status).toBe(200)
    expect((await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${expired}` } })).status).toBe(401)
    expect((await fetch(`${gateway.url}/orders?access_token=${good}`)).status).toBe(400)
    expect(upstream.requests).toHaveLength(1)
    const text = gateway.logs.join('')
    expect(text).toContain('"reason":"expired"')
    for (const token of [good, expired]) {
      expect(text).not.toContain(token)
      expect(text).not.toContain(token.split('.')[2]!)
    }
  })
})

describe('one keep-alive connection (the connection keeps its last Bearer header, src/authn/bearer.ts)', () => {
  let upstream: RecordingUpstream
  let issuer: TestIssuer
  let gateway: RunningGateway
  let client: Client
  let connections = 0
  const revoked = new Set<string>()

  beforeAll(async () => {
    upstream = await startRecordingUpstream()
    issuer = await startTestIssuer()
    gateway = await startGateway(testConfig({ upstream, issuer }), { isRevoked: (_principal, hash) => revoked.has(hash) })
    gateway.app.server.on('connection', () => { connections++ })
    client = new Client(gateway.url, { pipelining: 1 })
  })
  afterAll(async () => {
    await client.close()
    await gateway.close()
    await upstream.close()
    await issuer.close()
  })

  /** A GET on the one connection; `authorization` as a list sends that many headers. */
  async function send(...authorization: string[]): Promise<{ status: number; body: Record<string, unknown> }> {
    const res = await client.request({ path: '/orders', method: 'GET', headers: authorization.flatMap((value) => ['authorization', value]) })
    return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown> }
  }

  it('a different token after a good one on the same connection is validated as itself: refused when tampered, its own subject when valid', async () => {
    const good = await issuer.sign()
    const tampered = good.slice(0, -2) + (good.at(-2) === 'A' ? 'B' : 'A') + good.at(-1)!
    const other = await issuer.sign({ sub: 'user-2' })
    const before = connections
    expect((await send(`Bearer ${good}`)).status).toBe(200)
    expect(upstream.requests.at(-1)!.headers['x-auth-subject']).toBe('user-1')
    const count = upstream.requests.length
    expect(await send(`Bearer ${tampered}`)).toMatchObject({ status: 401, body: { error: 'invalid_token' } })
    expect(upstream.requests).toHaveLength(count)
    expect((await send(`Bearer ${other}`)).status).toBe(200)
    expect(upstream.requests.at(-1)!.headers['x-auth-subject']).toBe('user-2')
    expect((await send(`Bearer ${good}`)).status).toBe(200)
    expect(upstream.requests.at(-1)!.headers['x-auth-subject']).toBe('user-1')
    // All of it on one connection (at most the one the client opened for it).
    expect(connections - before).toBeLessThanOrEqual(1)
  })

  it('the header it keeps sent twice is refused (400), and nothing is forwarded', async () => {
    const good = await issuer.sign()
    expect((await send(`Bearer ${good}`)).status).toBe(200)
    const count = upstream.requests.length
    const before = connections
    expect(await send(`Bearer ${good}`, `Bearer ${good}`)).toMatchObject({ status: 400, body: { error: 'invalid_request', error_description: 'more than one Authorization header' } })
    expect(upstream.requests).toHaveLength(count)
    expect(connections).toBe(before)
  })

  it('a token revoked between two requests of the connection is refused on the second', async () => {
    const good = await issuer.sign({ sub: 'user-3' })
    expect((await send(`Bearer ${good}`)).status).toBe(200)
    const count = upstream.requests.length
    const before = connections
    revoked.add(tokenHash(good))
    expect(await send(`Bearer ${good}`)).toMatchObject({ status: 401, body: { error: 'invalid_token' } })
    expect(upstream.requests).toHaveLength(count)
    expect(connections).toBe(before)
  })
})

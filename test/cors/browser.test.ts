/**
 * CORS at the gateway in real headless Chromium (issue 18): a page served from one 127.0.0.1 port calls the
 * gateway on another with a Bearer token, as a SPA does, and the browser itself decides what the page may
 * read: the 200 and its JSON, a 401's WWW-Authenticate; the rate limits' fields, Retry-After and DPoP-Nonce;
 * nothing from an origin not allowed; credentials only with allow_credentials. Skipped without /usr/bin/chromium,
 * failed under CI (test/support/chromium.ts).
 */
import { createHash, randomUUID } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { chromiumSkipReason, useChromium } from '../support/chromium.js'
import { calculateJwkThumbprint, exportJWK, generateKeyPair, SignJWT } from 'jose'

/** A tiny site: one HTML page, so that the page's origin is this server's. */
async function startSite(): Promise<{ origin: string; close(): Promise<void> }> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>spa</title><p>spa</p>')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

/** What the page's fetch saw: a status, a header and the body it could read, or the error it rejected with. */
interface Seen { status?: number; challenge?: string | null; body?: unknown; error?: string }

const skip = chromiumSkipReason !== undefined
if (skip) console.log(`test/cors/browser.test.ts skipped: ${chromiumSkipReason}`)

describe.skipIf(skip)(`CORS in headless Chromium${skip ? ` (skipped: ${chromiumSkipReason})` : ''}`, () => {
  const newContext = useChromium()
  let spa: Awaited<ReturnType<typeof startSite>>
  let evil: Awaited<ReturnType<typeof startSite>>
  let upstream: RecordingUpstream
  let issuer: TestIssuer
  let gateway: RunningGateway
  let withCredentials: RunningGateway
  let limited: RunningGateway
  let token: string

  beforeAll(async () => {
    [spa, evil, upstream, issuer] = await Promise.all([startSite(), startSite(), startRecordingUpstream(), startTestIssuer()])
    const config = testConfig({ upstream, issuer, routes: [{ id: 'orders', path: '/api/orders/{id}', methods: ['GET'], upstream: 'main' }] })
    gateway = await startGateway({ ...config, cors: { allowed_origins: [spa.origin] } })
    withCredentials = await startGateway({ ...config, cors: { allowed_origins: [spa.origin], allow_credentials: true } })
    limited = await startGateway({
      ...testConfig({ upstream, issuer, routes: [{ id: 'orders', path: '/api/orders/{id}', methods: ['GET'], upstream: 'main', rate_limits: ['two'] }] }),
      cors: { allowed_origins: [spa.origin], allowed_headers: ['Authorization', 'DPoP'] },
      rate_limits: { policies: { two: { limit: 2, window: '10s', key: 'sub' } } },
      dpop: { nonce: true },
    })
    token = await issuer.sign({ sub: 'alice' })
  })
  afterAll(() => Promise.all([gateway?.close(), withCredentials?.close(), limited?.close(), spa?.close(), evil?.close(), upstream?.close(), issuer?.close()]))

  /** Opens `site`'s page and runs fetch(url, init) in it. */
  async function fetchFrom(test: TestContext, site: string, url: string, init: { token?: string; credentials?: 'include' } = {}): Promise<Seen> {
    const page = await (await newContext(test)).newPage()
    await page.goto(`${site}/`)
    return page.evaluate(async ({ url, token, credentials }) => {
      try {
        const res = await fetch(url, { ...(token !== undefined && { headers: { authorization: `Bearer ${token}` } }), ...(credentials && { credentials }) })
        return { status: res.status, challenge: res.headers.get('www-authenticate'), body: await res.json() as unknown }
      } catch (error) {
        return { error: String(error) }
      }
    }, { url, token: init.token, credentials: init.credentials })
  }

  it('a page on an allowed origin calls the API with a Bearer token and reads the 200 and its JSON', async (test) => {
    upstream.requests.length = 0
    const seen = await fetchFrom(test, spa.origin, `${gateway.url}/api/orders/42`, { token })
    expect(seen).toEqual({ status: 200, challenge: null, body: { ok: true, url: '/api/orders/42', bodyBytes: 0 } })
    // The browser's preflight was answered by the gateway: only the GET reached the upstream.
    expect(upstream.requests.map((r) => `${r.method} ${r.url} ${r.headers['x-auth-subject']}`)).toEqual(['GET /api/orders/42 alice'])
    expect(gateway.logs.some((line) => line.includes('"method":"OPTIONS"') && line.includes('"status":204'))).toBe(true)
  })

  it('reads a 401 and its WWW-Authenticate challenge', async (test) => {
    const seen = await fetchFrom(test, spa.origin, `${gateway.url}/api/orders/42`)
    expect(seen).toEqual({ status: 401, challenge: 'Bearer realm="test"', body: { error: 'unauthorized', error_description: expect.any(String) } })
  })

  it('a page on another origin cannot read anything: its fetch rejects and the request never reaches the upstream', async (test) => {
    upstream.requests.length = 0
    const withToken = await fetchFrom(test, evil.origin, `${gateway.url}/api/orders/7`, { token })
    expect(withToken.error).toMatch(/TypeError: Failed to fetch/)
    expect(gateway.logs.join('')).toContain('cors_origin_not_allowed')   // its preflight, refused
    const noToken = await fetchFrom(test, evil.origin, `${gateway.url}/api/orders/7`)
    expect(noToken.error).toMatch(/TypeError: Failed to fetch/)
    expect(upstream.requests).toHaveLength(0)
  })

  /** Opens `site`'s page, sends each of `calls` in turn from it, and returns what it could read of the named headers. */
  async function headersFrom(test: TestContext, site: string, calls: Array<{ url: string; headers: Record<string, string> }>, names: string[]) {
    const page = await (await newContext(test)).newPage()
    await page.goto(`${site}/`)
    return page.evaluate(async ({ calls, names }) => {
      const seen: Array<Record<string, string | number | null>> = []
      for (const call of calls) {
        const res = await fetch(call.url, { headers: call.headers })
        seen.push(Object.fromEntries([['status', res.status], ...names.map((name) => [name, res.headers.get(name)])]))
      }
      return seen
    }, { calls, names })
  }

  it('reads the rate limit fields of a 200 and RateLimit, Retry-After of the 429 (Access-Control-Expose-Headers)', async (test) => {
    upstream.requests.length = 0
    const bearer = await issuer.sign({ sub: `rate-${randomUUID()}` })
    const call = { url: `${limited.url}/api/orders/1`, headers: { authorization: `Bearer ${bearer}` } }
    const seen = await headersFrom(test, spa.origin, [call, call, call], ['ratelimit-policy', 'ratelimit', 'retry-after'])
    // `t` and Retry-After count down with the time between the calls: read, not pinned to a second.
    expect(seen).toEqual([
      { status: 200, 'ratelimit-policy': '"two";q=2;w=10', ratelimit: expect.stringMatching(/^"two";r=1;t=\d+$/), 'retry-after': null },
      { status: 200, 'ratelimit-policy': '"two";q=2;w=10', ratelimit: expect.stringMatching(/^"two";r=0;t=\d+$/), 'retry-after': null },
      { status: 429, 'ratelimit-policy': '"two";q=2;w=10', ratelimit: expect.stringMatching(/^"two";r=0;t=\d+$/), 'retry-after': expect.stringMatching(/^[1-5]$/) },
    ])
    expect(upstream.requests).toHaveLength(2)
  })

  it('reads DPoP-Nonce from the use_dpop_nonce answer, so a browser DPoP client can retry with it', async (test) => {
    upstream.requests.length = 0
    const keys = await generateKeyPair('ES256')
    const jwk = await exportJWK(keys.publicKey)
    const bound = await issuer.sign({ sub: 'dpop-user', cnf: { jkt: await calculateJwkThumbprint(jwk) } })
    const url = `${limited.url}/api/orders/2`
    // A proof without a nonce, made here: the browser only carries it (the key is the client's business).
    const ath = createHash('sha256').update(bound).digest('base64url')
    const proof = await new SignJWT({ jti: randomUUID(), iat: Math.floor(Date.now() / 1000), htm: 'GET', htu: url, ath })
      .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk }).sign(keys.privateKey)
    const [seen] = await headersFrom(test, spa.origin, [{ url, headers: { authorization: `DPoP ${bound}`, dpop: proof } }], ['dpop-nonce', 'www-authenticate'])
    expect(seen!.status).toBe(401)
    expect(seen!['www-authenticate']).toContain('error="use_dpop_nonce"')
    expect(seen!['dpop-nonce']).toMatch(/^[A-Za-z0-9_-]{30}$/)
    expect(upstream.requests).toHaveLength(0)
  })

  it('credentials: "include" works with allow_credentials: true, and fails without it', async (test) => {
    const allowed = await fetchFrom(test, spa.origin, `${withCredentials.url}/api/orders/42`, { token, credentials: 'include' })
    expect(allowed.status).toBe(200)
    const refused = await fetchFrom(test, spa.origin, `${gateway.url}/api/orders/43`, { token, credentials: 'include' })
    expect(refused.error).toMatch(/TypeError: Failed to fetch/)
  })
})

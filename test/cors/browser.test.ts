/**
 * CORS at the gateway in real headless Chromium (issue 18): a page served from one 127.0.0.1 port calls the
 * gateway on another with a Bearer token, as a SPA does, and the browser itself decides what the page may
 * read: the 200 and its JSON, a 401's WWW-Authenticate; nothing from an origin not allowed; credentials only
 * with allow_credentials. Skipped without /usr/bin/chromium, failed under CI (test/support/chromium.ts).
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { chromiumSkipReason, useChromium } from '../support/chromium.js'

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
  let token: string

  beforeAll(async () => {
    [spa, evil, upstream, issuer] = await Promise.all([startSite(), startSite(), startRecordingUpstream(), startTestIssuer()])
    const config = testConfig({ upstream, issuer, routes: [{ id: 'orders', path: '/api/orders/{id}', methods: ['GET'], upstream: 'main' }] })
    gateway = await startGateway({ ...config, cors: { allowed_origins: [spa.origin] } })
    withCredentials = await startGateway({ ...config, cors: { allowed_origins: [spa.origin], allow_credentials: true } })
    token = await issuer.sign({ sub: 'alice' })
  })
  afterAll(() => Promise.all([gateway?.close(), withCredentials?.close(), spa?.close(), evil?.close(), upstream?.close(), issuer?.close()]))

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

  it('credentials: "include" works with allow_credentials: true, and fails without it', async (test) => {
    const allowed = await fetchFrom(test, spa.origin, `${withCredentials.url}/api/orders/42`, { token, credentials: 'include' })
    expect(allowed.status).toBe(200)
    const refused = await fetchFrom(test, spa.origin, `${gateway.url}/api/orders/43`, { token, credentials: 'include' })
    expect(refused.error).toMatch(/TypeError: Failed to fetch/)
  })
})

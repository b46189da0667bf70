/**
 * Chromium (Debian's, through playwright-core) over HTTPS to the gateway: ALPN gives it h2 (server.http2), the
 * page sees `nextHopProtocol === 'h2'` for its navigation and for a fetch with a Bearer token, which reaches the
 * upstream, while a fetch without one is refused and never does.
 */
import { describe, expect, it } from 'vitest'
import { chromiumSkipReason, useChromium } from '../support/chromium.js'
import { startTestIssuer } from '../support/issuer.js'
import { startGateway, testConfig } from '../support/gateway.js'
import { startRecordingUpstream } from '../support/upstream.js'
import { createTestCa } from '../support/tls.js'

describe.skipIf(chromiumSkipReason !== undefined)(`Chromium over HTTPS negotiates h2${chromiumSkipReason ? ` (${chromiumSkipReason})` : ''}`, () => {
  const newContext = useChromium()

  it('the page and its fetches are h2; a token-bearing fetch is forwarded, one without is 401', async (test) => {
    const ca = createTestCa()
    test.onTestFinished(() => ca.remove())
    const cert = ca.issue('gateway', ['IP:127.0.0.1'])
    const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
    const gateway = await startGateway(testConfig({
      upstream, issuer, server: { tls: { cert_file: cert.certFile, key_file: cert.keyFile } },
      routes: [
        { id: 'page', path: '/', upstream: 'main', auth: 'none' },
        { id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['orders:read'] } },
      ],
    }))
    test.onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
    const token = await issuer.sign({ scope: 'orders:read' })
    // The private CA is not the browser's: certificate errors are ignored here (TLS itself is test/server/tls.test.ts's).
    const context = await newContext(test, { ignoreHTTPSErrors: true })
    const page = await context.newPage()
    const navigation = await page.goto(`https://127.0.0.1:${gateway.port}/`)
    expect(navigation?.status()).toBe(200)
    const seen = await page.evaluate(async (bearer) => {
      const allowed = await fetch('/api/orders/1', { headers: { authorization: `Bearer ${bearer}` } })
      const refused = await fetch('/api/orders/2')
      await Promise.all([allowed.text(), refused.text()])
      // Resource and navigation timings (the page's, not node's types: this function runs in Chromium).
      type Timing = { name: string; nextHopProtocol: string }
      const byType = performance.getEntriesByType.bind(performance) as unknown as (type: string) => Timing[]
      const entries = byType('resource')
      const navigationEntry = byType('navigation')[0]!
      return {
        navigation: navigationEntry.nextHopProtocol,
        fetches: entries.filter((entry) => entry.name.includes('/api/')).map((entry) => entry.nextHopProtocol),
        statuses: [allowed.status, refused.status],
      }
    }, token)
    expect(seen).toEqual({ navigation: 'h2', fetches: ['h2', 'h2'], statuses: [200, 401] })
    expect(upstream.requests.map((request) => request.url)).toEqual(['/', '/api/orders/1'])
  })
})

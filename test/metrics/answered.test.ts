/**
 * What the gateway answers itself is counted as `answered` in portcullis_requests_total, not as `forwarded`:
 * a CORS preflight it allows (204) and an RFC 9728 metadata document. Neither reaches the upstream.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const APP = 'https://app.example.com'
let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway

beforeAll(async () => {
  ;[upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const port = await closedPort()
  const base = `http://127.0.0.1:${port}`
  gateway = await startGateway({
    ...testConfig({ upstream, issuer, routes: [{ id: 'orders', path: '/orders/**', upstream: 'main' }] }),
    server: { listen: `127.0.0.1:${port}`, realm: 'test', public_url: base },
    cors: { allowed_origins: [APP] },
    resources: [{ resource: `${base}/orders`, routes: ['orders'], audience: [issuer.audience] }],
  }, { port })
})
afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

it('a CORS preflight and a metadata document are answered, not forwarded; a refused preflight is rejected', async () => {
  const preflight = await fetch(`${gateway.url}/orders/1`, { method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'GET' } })
  expect(preflight.status).toBe(204)
  const document = await fetch(`${gateway.url}/.well-known/oauth-protected-resource/orders`)
  expect(document.status).toBe(200)
  const refused = await fetch(`${gateway.url}/orders/1`, { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET' } })
  expect(refused.status).toBe(403)
  const metrics = await gateway.app.metrics.registry.metrics()
  expect(metrics).toContain('portcullis_requests_total{route="orders",method="OPTIONS",status="204",decision="answered",reason="",protocol="http1"} 1')
  expect(metrics).toContain('portcullis_requests_total{route="(resource-metadata)",method="GET",status="200",decision="answered",reason="",protocol="http1"} 1')
  expect(metrics).toMatch(/portcullis_requests_total\{route="orders",method="OPTIONS",status="403",decision="rejected",[^}]*\} 1/)
  expect(metrics).not.toMatch(/decision="forwarded"/)
  expect(upstream.requests).toHaveLength(0)
})

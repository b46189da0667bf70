/**
 * A reload keeps the compiled rule of a route it did not change (the same object: check/load-off-thread.ts) only when
 * nothing else a rule depends on changed (rules/compile.ts, ruleContext): here the routes stay the very objects in
 * service while `server.max_body_size` (every route's default limit) and `scope_implies` change, and the new values
 * apply to them at once; a route changed beside unchanged ones serves its new self.
 */
import { describe, expect, it, type TestContext } from 'vitest'
import { stringify } from 'yaml'
import { freezeConfig, loadConfig } from '../../src/check/load.js'
import type { GatewayConfig } from '../../src/config/schema.js'
import { startGateway } from '../support/gateway.js'
import { startTestIssuer } from '../support/issuer.js'
import { startRecordingUpstream } from '../support/upstream.js'

async function setUp(context: TestContext) {
  const upstream = await startRecordingUpstream()
  const issuer = await startTestIssuer()
  context.onTestFinished(() => Promise.all([upstream.close(), issuer.close()]).then(() => undefined))
  const yaml = {
    server: { realm: 'test', max_body_size: '10kb' },
    upstreams: { main: { url: upstream.url, timeout: '2s' } },
    issuers: [{ issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }],
    routes: [
      { id: 'upload', path: '/upload/**', upstream: 'main', auth: 'none', methods: ['POST'] },
      { id: 'orders', path: '/orders/**', upstream: 'main', scopes: { all: ['orders:read'] } },
      { id: 'open', path: '/open/**', upstream: 'main', auth: 'none' },
    ],
  }
  const gateway = await startGateway(yaml)
  context.onTestFinished(() => gateway.close())
  // The config in service as a reload's loader leaves it: loaded, frozen, its route objects kept by what comes next.
  const served = loadConfig('portcullis.yaml', stringify(yaml), {})
  expect(await gateway.app.gateway.applyConfig(served)).toEqual([])
  const post = (bytes: number) => fetch(`${gateway.url}/upload/x`, { method: 'POST', body: 'x'.repeat(bytes) }).then((res) => res.status)
  return { upstream, issuer, gateway, served, post }
}

describe('a reload that keeps route objects', () => {
  it('a changed default body limit reaches the unchanged routes: 413 at once, the upstream not reached', async (context) => {
    const { upstream, gateway, served, post } = await setUp(context)
    expect(await post(5_000)).toBe(200)
    const reached = upstream.requests.length
    const smaller: GatewayConfig = freezeConfig({ ...served, server: { ...served.server, max_body_size: '1kb' }, routes: served.routes })
    expect(await gateway.app.gateway.applyConfig(smaller)).toEqual([])
    expect(await post(5_000)).toBe(413)
    expect(upstream.requests.length).toBe(reached)
    expect(await post(500)).toBe(200)
  })

  it('a new scope_implies reaches the unchanged routes; a route changed beside them serves its new self', async (context) => {
    const { upstream, issuer, gateway, served } = await setUp(context)
    const admin = await issuer.sign({ scope: 'orders:admin' })
    const get = (url: string, token?: string) => fetch(`${gateway.url}${url}`, { headers: token ? { authorization: `Bearer ${token}` } : {} })
    expect((await get('/orders/1', admin)).status).toBe(403)
    const implied: GatewayConfig = freezeConfig({ ...served, scope_implies: { 'orders:admin': ['orders:read'] }, routes: served.routes })
    await gateway.app.gateway.applyConfig(implied)
    expect((await get('/orders/1', admin)).status).toBe(200)

    // Same context, one route changed: `open` now needs a token, the others are the same objects and serve as before.
    const changed: GatewayConfig = freezeConfig({
      ...implied, routes: [implied.routes[0]!, implied.routes[1]!, freezeConfig({ ...implied.routes[2]!, auth: 'required' as const })],
    })
    const reached = upstream.requests.length
    await gateway.app.gateway.applyConfig(changed)
    const refused = await get('/open/x')
    expect(refused.status).toBe(401)
    expect(refused.headers.get('www-authenticate')).toMatch(/^Bearer /)
    expect(upstream.requests.length).toBe(reached)
    expect((await get('/orders/1', admin)).status).toBe(200)
    expect((await get('/open/x', admin)).status).toBe(200)
  })
})

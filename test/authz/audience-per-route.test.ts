/**
 * RFC 8707 audience per route, through the whole flow a self-registered client takes: register (RFC 7591),
 * authorize with `resource=<gateway>/ra`, redeem, then call every kind of route in proxy mode and through the
 * decision endpoint. A token issued for resource R alone is accepted on R's routes and nowhere else: not on
 * another resource's, not on routes outside every resource (which accept only `access_token.audience`), not
 * on an `auth: optional` route. Every refusal is a 401 invalid_token, and the recording upstream never sees it.
 */
import { describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { ALICE } from '../support/authserver.js'
import { FormBrowser, loginAndConsent } from '../support/browser.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { authorizationUrl, register } from '../support/registration.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
const OWN_AUDIENCE = 'https://gateway.example.com'
const REDIRECT = 'http://127.0.0.1/callback'

interface Setup {
  gateway: RunningGateway & { issuer: string }
  upstream: RecordingUpstream
  as: oauth.AuthorizationServer
  ra: string
  rb: string
}

/** Resources `/ra` and `/rb`, plain routes `/api` and `/files`, an optional and an anonymous route, a decision listener. */
async function start(context: TestContext, format: 'jwt' | 'opaque'): Promise<Setup> {
  const upstream = await startRecordingUpstream()
  context.onTestFinished(() => upstream.close())
  const port = await closedPort()
  const origin = `http://127.0.0.1:${port}`
  const [ra, rb] = [`${origin}/ra`, `${origin}/rb`]
  const gateway = await startAuthServerGateway({
    access_token: { audience: [OWN_AUDIENCE], format },
    users: [ALICE],
    registration: { enabled: true, policy: { scopes: ['api:read'] } },
  }, {
    server: { public_url: origin },
    upstreams: { main: { url: upstream.url } },
    routes: [
      { id: 'ra', path: '/ra/**', upstream: 'main', scopes: { all: ['api:read'] } },
      { id: 'rb', path: '/rb/**', upstream: 'main', scopes: { all: ['api:read'] } },
      { id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['api:read'] } },
      { id: 'files', path: '/files/**', upstream: 'main' },
      { id: 'maybe', path: '/maybe/**', upstream: 'main', auth: 'optional' },
      { id: 'open', path: '/open/**', upstream: 'main', auth: 'none' },
      { id: 'tools', path: '/tools/mcp', upstream: 'main', mcp: { tools: { '*': { scopes: { all: ['api:read'] } } } } },
    ],
    resources: [{ resource: ra, routes: ['ra'] }, { resource: rb, routes: ['rb'] }],
    decision: { listen: '127.0.0.1:0' },
  }, { port })
  context.onTestFinished(() => gateway.close())
  const issuer = new URL(gateway.issuer)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  return { gateway, upstream, as, ra, rb }
}

/** Registers a public client, takes alice through /authorize (with `resources`, PKCE) and redeems the code. */
async function accessToken(t: Setup, resources: readonly string[]): Promise<string> {
  const registered = await register(t.gateway, {
    redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], scope: 'api:read',
  })
  expect(registered.status).toBe(201)
  const client: oauth.Client = { client_id: registered.body.client_id as string, token_endpoint_auth_method: 'none' }
  const { url, verifier, state } = await authorizationUrl(t.gateway.issuer, client.client_id, REDIRECT, { scope: 'api:read', resources })
  const browser = new FormBrowser(t.gateway.url)
  const answer = await loginAndConsent(browser, await browser.get(url), ALICE)
  const params = oauth.validateAuthResponse(t.as, client, new URL(answer.location!), state)
  const tokens = await oauth.processAuthorizationCodeResponse(t.as, client,
    await oauth.authorizationCodeGrantRequest(t.as, client, oauth.None(), params, REDIRECT, verifier, insecure))
  return tokens.access_token
}

/** A proxied call: its status, and whether the upstream saw it. */
async function call(t: Setup, token: string, target: string): Promise<{ status: number; reached: boolean; challenge: string | null }> {
  const before = t.upstream.requests.length
  const response = await fetch(`${t.gateway.url}${target}`, { headers: { authorization: `Bearer ${token}` } })
  await response.arrayBuffer()
  return { status: response.status, reached: t.upstream.requests.length > before, challenge: response.headers.get('www-authenticate') }
}

/** An MCP tool call (JSON-RPC over POST) on the `mcp` route outside every resource. */
async function callTool(t: Setup, token: string): Promise<{ status: number; reached: boolean }> {
  const before = t.upstream.requests.length
  const response = await fetch(`${t.gateway.url}/tools/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'list_orders', arguments: {} } }),
  })
  await response.arrayBuffer()
  return { status: response.status, reached: t.upstream.requests.length > before }
}

/** A decision for `GET target`, as nginx's auth_request asks it (docs/decision.md). */
async function decide(t: Setup, token: string, target: string): Promise<number> {
  const response = await fetch(`${t.gateway.decisionUrl!}/decide`, {
    headers: { 'x-original-method': 'GET', 'x-original-uri': target, authorization: `Bearer ${token}` },
  })
  await response.arrayBuffer()
  return response.status
}

describe.each(['jwt', 'opaque'] as const)('a %s access token issued for one resource', (format) => {
  it('is accepted on that resource\'s routes only, in proxy mode and at the decision endpoint', async (context) => {
    const t = await start(context, format)
    const token = await accessToken(t, [t.ra])
    if (format === 'jwt') expect(decodeJwt(token).aud).toBe(t.ra)
    expect(await call(t, token, '/ra/x')).toMatchObject({ status: 200, reached: true })
    for (const target of ['/rb/x', '/api/x', '/files/x', '/maybe/x']) {
      const refused = await call(t, token, target)
      expect(refused, target).toMatchObject({ status: 401, reached: false })
      expect(refused.challenge, target).toMatch(/^Bearer .*error="invalid_token"/)
    }
    expect(await callTool(t, token)).toEqual({ status: 401, reached: false })
    // `auth: none` looks at no token at all.
    expect(await call(t, token, '/open/x')).toMatchObject({ status: 200, reached: true })
    expect(await decide(t, token, '/ra/x')).toBe(200)
    for (const target of ['/rb/x', '/api/x', '/files/x', '/maybe/x']) expect(await decide(t, token, target), target).toBe(401)
    const log = t.gateway.logs.join('\n')
    expect(log).toContain('wrong_resource: aud names resources only')
  })

  it('without a resource is the issuer\'s own audience: accepted outside resources, refused on theirs', async (context) => {
    const t = await start(context, format)
    const token = await accessToken(t, [])
    if (format === 'jwt') expect(decodeJwt(token).aud).toBe(OWN_AUDIENCE)
    for (const target of ['/api/x', '/files/x', '/maybe/x']) expect(await call(t, token, target), target).toMatchObject({ status: 200, reached: true })
    expect(await callTool(t, token)).toEqual({ status: 200, reached: true })
    for (const target of ['/ra/x', '/rb/x']) expect(await call(t, token, target), target).toMatchObject({ status: 401, reached: false })
    expect(await decide(t, token, '/api/x')).toBe(200)
    expect(await decide(t, token, '/ra/x')).toBe(401)
  })

  it('issued for a resource and the own audience together: accepted on both, not on the other resource', async (context) => {
    const t = await start(context, format)
    const token = await accessToken(t, [t.ra, OWN_AUDIENCE])
    expect(await call(t, token, '/ra/x')).toMatchObject({ status: 200, reached: true })
    expect(await call(t, token, '/api/x')).toMatchObject({ status: 200, reached: true })
    expect(await call(t, token, '/rb/x')).toMatchObject({ status: 401, reached: false })
  })
})

/**
 * Issue 18, RFC 9728 and RFC 8707 at the gateway: the protected-resource metadata documents (root and
 * path-suffixed, field by field), `resource_metadata` in every 401 and `insufficient_scope` challenge of a
 * resource's routes, tokens bound to their resource (a token for A is refused on B), and oauth4webapi
 * discovering the API from its challenge and getting a token for it from the embedded server.
 */
import * as oauth from 'oauth4webapi'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/check/load.js'
import { configProblems } from '../support/config-problems.js'
import { configWarnings } from '../../src/check/lint.js'
import { basic, postForm } from '../support/authserver.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

/** RFC 9728 §2 with RFC 9449: the default `dpop.algorithms` (issue 20). */
const DPOP_ALGS = ['ES256', 'ES384', 'PS256', 'RS256', 'EdDSA', 'Ed25519']

const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }

let gateway: RunningGateway & { issuer: string }
let upstream: RecordingUpstream
let base: string
let ordersResource: string

beforeAll(async () => {
  upstream = await startRecordingUpstream()
  const port = await closedPort()
  base = `http://127.0.0.1:${port}`
  ordersResource = `${base}/orders`
  gateway = await startAuthServerGateway({
    access_token: { audience: ['legacy-api'] },
    clients: [{ ...SVC, grant_types: ['client_credentials'], scopes: ['echo:read', 'orders:read', 'orders:admin'] }],
  }, {
    server: { realm: 'test', public_url: base },
    upstreams: { main: { url: upstream.url } },
    routes: [
      { id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['echo:read'] } },
      { id: 'orders', path: '/orders/**', upstream: 'main', scopes: { any: ['orders:read', 'orders:admin'] } },
      { id: 'orders-admin', path: '/orders/admin/**', upstream: 'main', scopes: { all: ['orders:admin'] },
        claims: { all: [{ claim: 'client_id', equals: 'nobody' }] } },
      { id: 'open', path: '/open/**', upstream: 'main' },
    ],
    resources: [
      { resource: base, routes: ['api'], audience: ['legacy-api'], resource_name: 'Echo API' },
      { resource: ordersResource, routes: ['orders', 'orders-admin'], resource_documentation: 'https://docs.example.com/orders' },
    ],
  }, { port })
})

afterAll(async () => {
  await gateway.close()
  await upstream.close()
})

beforeEach(() => { upstream.requests.length = 0 })

async function token(resource?: string | string[], scope = 'echo:read orders:read'): Promise<string> {
  const form: Record<string, string> = { grant_type: 'client_credentials', scope }
  const body = new URLSearchParams(form)
  for (const value of resource === undefined ? [] : [resource].flat()) body.append('resource', value)
  const res = await fetch(`${base}/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(SVC.client_id, SVC.client_secret) }, body,
  })
  const json = await res.json() as { access_token: string }
  expect(res.status).toBe(200)
  return json.access_token
}

const call = (path: string, accessToken?: string) =>
  fetch(`${base}${path}`, { headers: accessToken === undefined ? {} : { authorization: `Bearer ${accessToken}` } })

const ROOT_METADATA = () => `${base}/.well-known/oauth-protected-resource`
const ORDERS_METADATA = () => `${base}/.well-known/oauth-protected-resource/orders`

describe('RFC 9728 metadata documents', () => {
  it('serves the root resource: every field as §2 defines it', async () => {
    const res = await fetch(ROOT_METADATA())
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(res.headers.get('access-control-allow-origin')).toBe('*')
    expect(await res.json()).toEqual({
      resource: base,
      authorization_servers: [gateway.issuer],
      scopes_supported: ['echo:read'],
      bearer_methods_supported: ['header'], dpop_signing_alg_values_supported: DPOP_ALGS,
      resource_name: 'Echo API',
    })
  })

  it('serves a resource with a path at the path-suffixed URL (§3.1), scopes from all its routes', async () => {
    expect(await (await fetch(ORDERS_METADATA())).json()).toEqual({
      resource: ordersResource,
      authorization_servers: [gateway.issuer],
      scopes_supported: ['orders:read', 'orders:admin'],
      bearer_methods_supported: ['header'], dpop_signing_alg_values_supported: DPOP_ALGS,
      resource_documentation: 'https://docs.example.com/orders',
    })
  })

  it('answers HEAD and a CORS preflight, refuses other methods, and never forwards', async () => {
    const head = await fetch(ORDERS_METADATA(), { method: 'HEAD' })
    expect(head.status).toBe(200)
    expect(await head.text()).toBe('')
    const preflight = await fetch(ORDERS_METADATA(), { method: 'OPTIONS', headers: { origin: 'https://spa.example', 'access-control-request-method': 'GET' } })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*')
    const post = await fetch(ORDERS_METADATA(), { method: 'POST', body: '{}' })
    expect(post.status).toBe(405)
    expect(post.headers.get('allow')).toBe('GET, HEAD, OPTIONS')
    expect((await fetch(`${ORDERS_METADATA()}/x`)).status).toBe(404)
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('resource_metadata in challenges (§5.1)', () => {
  it('is in the 401 without a token and with a bad one, on each resource its own URL, after the scopes the route asks for', async () => {
    // MCP 2026-07-28, Scope Selection Strategy: the 401 names the route's scopes (every `all`, the first `any`).
    expect((await call('/api/x')).headers.get('www-authenticate'))
      .toBe(`Bearer realm="test", scope="echo:read", resource_metadata="${ROOT_METADATA()}"`)
    expect((await call('/orders/1')).headers.get('www-authenticate'))
      .toBe(`Bearer realm="test", scope="orders:read", resource_metadata="${ORDERS_METADATA()}"`)
    expect((await call('/orders/admin/1')).headers.get('www-authenticate'))
      .toBe(`Bearer realm="test", scope="orders:admin", resource_metadata="${ORDERS_METADATA()}"`)
    const bad = await call('/orders/1', 'not-a-token')
    expect(bad.status).toBe(401)
    expect(bad.headers.get('www-authenticate'))
      .toMatch(/error="invalid_token", .*, scope="orders:read", resource_metadata="[^"]+\/oauth-protected-resource\/orders"$/)
    // The token of another resource is the wrong token: a 401 that names this route's scopes too.
    const wrong = await call('/orders/1', await token(base, 'echo:read orders:read'))
    expect(wrong.status).toBe(401)
    expect(wrong.headers.get('www-authenticate')).toContain(`scope="orders:read", resource_metadata="${ORDERS_METADATA()}"`)
    expect(upstream.requests).toHaveLength(0)
  })

  it('is in the 403 insufficient_scope, not in a 403 for a failed claim condition, and absent outside resources', async () => {
    const readOnly = await token(ordersResource, 'orders:read')
    const scope = await call('/orders/admin/1', readOnly)
    expect(scope.status).toBe(403)
    expect(scope.headers.get('www-authenticate')).toContain(`scope="orders:admin", resource_metadata="${ORDERS_METADATA()}"`)
    const claims = await call('/orders/admin/1', await token(ordersResource, 'orders:admin'))
    expect(claims.status).toBe(403)
    expect(claims.headers.get('www-authenticate')).toBeNull()
    expect((await call('/open/x')).headers.get('www-authenticate')).toBe('Bearer realm="test"')
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('tokens bound to their resource (RFC 8707)', () => {
  it('a token for the orders resource works there and is refused on the root resource', async () => {
    const forOrders = await token(ordersResource)
    expect((await call('/orders/1', forOrders)).status).toBe(200)
    const refused = await call('/api/x', forOrders)
    expect(refused.status).toBe(401)
    expect(refused.headers.get('www-authenticate')).toContain(`error="invalid_token"`)
    expect(refused.headers.get('www-authenticate')).toContain(`resource_metadata="${ROOT_METADATA()}"`)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/orders/1'])
  })

  it("a token for both works on both; the default audience only where the resource lists it", async () => {
    const both = await token([base, ordersResource])
    expect((await call('/api/x', both)).status).toBe(200)
    expect((await call('/orders/1', both)).status).toBe(200)
    const legacy = await token()
    expect((await call('/api/x', legacy)).status).toBe(200)
    expect((await call('/orders/1', legacy)).status).toBe(401)
    expect(upstream.requests).toHaveLength(3)
  })

  it('an unknown resource at the token endpoint is invalid_target', async () => {
    const res = await postForm(gateway, '/token', { grant_type: 'client_credentials', resource: `${base}/other` },
      { authorization: basic(SVC.client_id, SVC.client_secret) })
    expect(res.status).toBe(400)
    expect(res.body.error).toBe('invalid_target')
  })
})

describe('a client that knows only the API URL (oauth4webapi)', () => {
  it('reads resource_metadata from the 401, discovers the resource and its server, gets a token for it, and calls', async () => {
    const api = new URL(`${ordersResource}/42`)
    const challenge = await oauth.protectedResourceRequest('an-expired-token', 'GET', api, undefined, undefined, { [oauth.allowInsecureRequests]: true })
      .catch((error: unknown) => error)
    expect(challenge).toBeInstanceOf(oauth.WWWAuthenticateChallengeError)
    const metadataUrl = (challenge as oauth.WWWAuthenticateChallengeError).cause[0]!.parameters.resource_metadata!
    expect(metadataUrl).toBe(ORDERS_METADATA())
    const resource = await oauth.processResourceDiscoveryResponse(new URL(ordersResource),
      await oauth.resourceDiscoveryRequest(new URL(ordersResource), { [oauth.allowInsecureRequests]: true }))
    const issuer = new URL(resource.authorization_servers![0]!)
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { [oauth.allowInsecureRequests]: true }))
    const client = { client_id: SVC.client_id }
    const response = await oauth.clientCredentialsGrantRequest(as, client, oauth.ClientSecretBasic(SVC.client_secret),
      { scope: resource.scopes_supported![0]!, resource: resource.resource }, { [oauth.allowInsecureRequests]: true })
    const tokens = await oauth.processClientCredentialsResponse(as, client, response)
    const res = await oauth.protectedResourceRequest(tokens.access_token, 'GET', api, undefined, undefined, { [oauth.allowInsecureRequests]: true })
    expect(res.status).toBe(200)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/orders/42'])
  })
})

describe('check', () => {
  const config = (resources: string, server = '  public_url: "https://api.example.com"\n') =>
    `server:\n${server}upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: a\n    path: "/a/**"\n    upstream: main\n` +
    `  - id: b\n    path: "/b/**"\n    upstream: main\nresources:\n${resources}`
  const problems = configProblems

  it('accepts resources served by this gateway', () => {
    expect(problems(config('  - { resource: "https://api.example.com", routes: [a] }\n  - { resource: "https://api.example.com/b", routes: [b] }\n'))).toEqual([])
  })

  it('refuses an identifier this gateway does not serve, a trailing slash, http off loopback', () => {
    expect(problems(config('  - { resource: "https://other.example.com", routes: [a] }\n')))
      .toEqual(['resources[0].resource: must be served by this gateway: under https://api.example.com (server.public_url, or the listener)'])
    expect(problems(config('  - { resource: "https://api.example.com/", routes: [a] }\n')))
      .toEqual(['resources[0].resource: must not end with "/" (RFC 9728 §3.1 drops it when forming the metadata URL: write it without)'])
    expect(problems(config('  - { resource: "http://api.example.com", routes: [a] }\n', '  public_url: "http://api.example.com"\n')))
      .toEqual(['resources[0].resource: must be https:// (http:// on loopback only, or with server.allow_insecure_http)'])
    expect(problems(config('  - { resource: "http://0.0.0.0:8080", routes: [a] }\n', '  listen: "0.0.0.0:8080"\n')))
      .toContain('resources[0].resource: set server.public_url: the listener does not say how clients reach the gateway')
  })

  it('refuses an unknown route, a route in two resources, and two resources at one metadata URL', () => {
    expect(problems(config('  - { resource: "https://api.example.com", routes: [a, nope] }\n  - { resource: "https://api.example.com/x", routes: [a] }\n')))
      .toEqual(['resources[0].routes[1]: unknown route id "nope"', 'resources[1].routes[0]: route "a" is already in the resource https://api.example.com'])
    expect(problems(config('  - { resource: "https://api.example.com/x", routes: [a] }\n  - { resource: "https://api.example.com/x", routes: [b] }\n')))
      .toEqual(['resources[1].resource: has the same metadata URL as https://api.example.com/x'])
  })

  it('warns when a resource names no authorization server and none is known (MCP clients need one)', () => {
    const text = config('  - { resource: "https://api.example.com", routes: [a] }\n  - { resource: "https://api.example.com/b", routes: [b], authorization_servers: ["https://as.example.com"] }\n')
    expect(configWarnings(loadConfig('gw.yaml', text, {})).filter((warning) => warning.startsWith('resources')))
      .toEqual(['resources[0] (https://api.example.com) names no authorization server: set authorization_servers, enable authorization_server, or give an issuer discovery: true; clients (MCP\'s among them) cannot find where to get a token'])
  })
})

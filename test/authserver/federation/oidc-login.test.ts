/**
 * Sign-in with an upstream OpenID Connect provider (node-oidc-provider, run here): the whole chain over HTTP,
 * what the upstream was asked, the identity we make of its answer, and how our tokens carry it to the gateway.
 */
import { randomUUID } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { calculateJwkThumbprint, exportJWK, generateKeyPair, SignJWT } from 'jose'
import { FormBrowser } from '../../support/browser.js'
import { APP_CLIENT, UPSTREAM_CLIENT, authorizeUrl, federatedSignIn, jwtPayload, redeem, signInVia, startFederated, type FederatedSetup } from '../../support/federation.js'
import { R1, TV1 } from '../../support/authserver.js'

const ACCOUNTS = {
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice', groups: ['staff', 'orders-admins'] },
  bob: { email: 'bob@example.com', email_verified: true, name: 'Bob', groups: ['staff'] },
}

describe('sign-in with an OpenID Connect provider', () => {
  let setup: FederatedSetup | undefined
  afterEach(async () => { await setup?.close(); setup = undefined })

  it('one provider and no local users: /authorize goes straight to the provider (code + PKCE S256 + state + nonce), and back to our consent and code', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    const visited: string[] = []
    const done = await federatedSignIn(browser, upstream!, 'alice', authorizeUrl(), visited)
    // What the provider was asked: its own authorization endpoint, with our callback and the protocol's checks.
    const asked = new URL(visited[0]!)
    expect(asked.pathname).toBe('/auth')
    expect(Object.fromEntries(asked.searchParams)).toMatchObject({
      client_id: 'portcullis', response_type: 'code', redirect_uri: `${gateway.issuer}/callback/corp`,
      scope: 'openid email profile groups', code_challenge_method: 'S256',
    })
    for (const name of ['state', 'nonce', 'code_challenge']) expect(asked.searchParams.get(name)).toMatch(/^[A-Za-z0-9_-]{43,}$/)
    // Never the client's own state or nonce: each leg has its own.
    expect(asked.searchParams.get('state')).not.toBe('client-state')
    expect(asked.searchParams.get('nonce')).not.toBe('client-nonce')
    const params = new URL(done.location!).searchParams
    expect(params.get('state')).toBe('client-state')
    expect(params.get('iss')).toBe(gateway.issuer)
    const tokens = await redeem(gateway, done.location)
    const access = jwtPayload(tokens.access_token)
    // Issuer-scoped subject; the provider's groups and e-mail in our access token (access_token.claims).
    expect(access).toMatchObject({ iss: gateway.issuer, sub: 'corp:alice', groups: ['staff', 'orders-admins'], email: 'alice@example.com' })
    const id = jwtPayload(tokens.id_token)
    expect(id).toMatchObject({ iss: gateway.issuer, sub: 'corp:alice', aud: APP_CLIENT.client_id, nonce: 'client-nonce' })
    // /userinfo answers for the federated user from what the provider said at sign-in.
    const userinfo = await fetch(`${gateway.url}/userinfo`, { headers: { authorization: `Bearer ${String(tokens.access_token)}` } })
    expect(await userinfo.json()).toEqual({ sub: 'corp:alice' })
  })

  it('the browser session is remembered: a second authorization request does not visit the provider again', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    const before = upstream!.requests.length
    const again = await browser.get(authorizeUrl({ state: 'second' }))
    // Consent is remembered per client only when asked; here the consent page comes, but no provider.
    expect(again.location).not.toContain(new URL(upstream!.issuer).host)
    expect(upstream!.requests.length).toBe(before)
  })

  it('prompt=login and max_age go to the provider: a new upstream login, not the remembered one', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    const visited: string[] = []
    const forced = await federatedSignIn(browser, upstream!, 'alice', authorizeUrl({ prompt: 'login', state: 'forced' }), visited)
    expect(new URL(visited[0]!).searchParams.get('prompt')).toBe('login')
    expect(new URL(forced.location!).searchParams.get('state')).toBe('forced')
    const visitedAge: string[] = []
    await federatedSignIn(browser, upstream!, 'alice', authorizeUrl({ max_age: '0', state: 'aged' }), visitedAge)
    expect(new URL(visitedAge[0]!).searchParams.get('prompt')).toBe('login')
    expect(new URL(visitedAge[0]!).searchParams.get('max_age')).toBe('0')
  })

  it('two providers and local users: a chooser with a button per provider and the password form', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }, { id: 'partner', config: { name: 'Partner SSO' } }],
      { users: [{ username: 'local', password: 'local password 0123' }] })
    const { gateway } = setup
    const browser = new FormBrowser(gateway.url)
    const start = await browser.get(authorizeUrl())
    const page = await browser.get(start.location!)
    expect(page.status).toBe(200)
    expect(page.text).toContain('id="provider-corp"')
    expect(page.text).toContain('Continue with Partner SSO')
    expect(page.text).toContain('name="password"')
  })

  it('the same sub at two providers is two people', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }, { id: 'partner', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [corp, partner] } = setup
    const corpTokens = await redeem(gateway, (await signInVia(new FormBrowser(gateway.url), 'corp', corp!, 'alice')).location)
    const partnerTokens = await redeem(gateway, (await signInVia(new FormBrowser(gateway.url), 'partner', partner!, 'alice')).location)
    expect(jwtPayload(corpTokens.access_token).sub).toBe('corp:alice')
    expect(jwtPayload(partnerTokens.access_token).sub).toBe('partner:alice')
  })
})

describe('what federation leaves unchanged', () => {
  let setup: FederatedSetup | undefined
  afterEach(async () => { await setup?.close(); setup = undefined })

  it('a self-registered client (RFC 7591) asks for a resource (RFC 8707) with a DPoP proof: the federated user\'s token is bound and for that resource', async () => {
    const resource = 'https://mcp.example.com/mcp'
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }], {
      access_token: { audience: ['orders-api', resource], claims: ['groups'] },
      registration: { enabled: true, policy: { scopes: ['openid', 'orders:read'] } },
    })
    const { gateway, upstreams: [upstream] } = setup
    const registered = await fetch(`${gateway.url}/register`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ redirect_uris: [R1], token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], scope: 'openid orders:read' }),
    })
    expect(registered.status).toBe(201)
    const { client_id: clientId } = await registered.json() as { client_id: string }
    const done = await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'alice', authorizeUrl({ client_id: clientId, resource }))
    const code = new URL(done.location!).searchParams.get('code')!
    const key = await generateKeyPair('ES256')
    const proof = await new SignJWT({ jti: randomUUID(), htm: 'POST', htu: `${gateway.issuer}/token`, iat: Math.floor(Date.now() / 1000) })
      .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: await exportJWK(key.publicKey) }).sign(key.privateKey)
    const res = await fetch(`${gateway.url}/token`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: proof },
      body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: R1, client_id: clientId, code_verifier: TV1.verifier, resource }),
    })
    const body = await res.json() as Record<string, unknown>
    expect(res.status, JSON.stringify(body)).toBe(200)
    expect(body.token_type).toBe('DPoP')
    const access = jwtPayload(body.access_token)
    expect(access).toMatchObject({ sub: 'corp:alice', aud: resource, client_id: clientId, groups: ['staff', 'orders-admins'] })
    expect((access.cnf as { jkt?: string }).jkt).toBe(await calculateJwkThumbprint(await exportJWK(key.publicKey)))
  })

  it('a client known by its metadata document (a URL client_id) gets a code for the federated user', async () => {
    const server = http.createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
        client_id: documentUrl, client_name: 'Docs CLI', redirect_uris: [R1], grant_types: ['authorization_code'], token_endpoint_auth_method: 'none', scope: 'openid orders:read',
      }))
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const documentUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/client.json`
    try {
      setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }], {
        client_metadata_documents: { enabled: true, allow_private_addresses: true, scopes: ['openid', 'orders:read'] },
      })
      const { gateway, upstreams: [upstream] } = setup
      const done = await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'alice', authorizeUrl({ client_id: documentUrl }))
      const res = await fetch(`${gateway.url}/token`, {
        method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'authorization_code', code: new URL(done.location!).searchParams.get('code')!, redirect_uri: R1, client_id: documentUrl, code_verifier: TV1.verifier }),
      })
      const body = await res.json() as Record<string, unknown>
      expect(res.status, JSON.stringify(body)).toBe(200)
      expect(jwtPayload(body.access_token)).toMatchObject({ sub: 'corp:alice', client_id: documentUrl })
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it('the groups are read again at the next sign-in; no secret, code or provider token is ever logged', async () => {
    const accounts = structuredClone(ACCOUNTS)
    setup = await startFederated([{ id: 'corp', upstream: { accounts } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    const first = await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    expect(jwtPayload(first.access_token).groups).toEqual(['staff', 'orders-admins'])
    accounts.alice.groups = ['staff']
    const visited: string[] = []
    const second = await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice', authorizeUrl({ prompt: 'login' }), visited)).location)
    expect(jwtPayload(second.access_token).groups).toEqual(['staff'])
    const logs = gateway.logs.join('\n') + gateway.audit.join('\n')
    expect(logs).not.toContain(UPSTREAM_CLIENT.client_secret)
    for (const url of visited) {
      const state = new URL(url).searchParams.get('state')
      if (state) expect(logs).not.toContain(state)
    }
    expect(logs).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\.eyJ/)
  })
})

describe('preset: entra, with Entra-shaped claims', () => {
  let setup: FederatedSetup | undefined
  afterEach(async () => { await setup?.close(); setup = undefined })

  const TENANT = '0a1b2c3d-4e5f-6789-abcd-ef0123456789'
  const ENTRA_ACCOUNTS = {
    alice: { tid: TENANT, oid: '9f8e7d6c-0000-4000-8000-000000000001', email: 'alice@contoso.example', name: 'Alice', groups: ['6f1c0a2e'] },
    mallory: { tid: '11111111-2222-4333-8444-555555555555', oid: '9f8e7d6c-0000-4000-8000-000000000002', email: 'alice@contoso.example', groups: ['6f1c0a2e'] },
  }

  it('the subject is tid:oid (not the pairwise sub); allow.tenants refuses another tenant, whatever e-mail it claims', async () => {
    setup = await startFederated([{
      id: 'entra', upstream: { accounts: ENTRA_ACCOUNTS },
      config: { preset: 'entra', scopes: ['openid', 'email', 'profile', 'groups', 'tenant'], allow: { tenants: [TENANT] } },
    }])
    const { gateway, upstreams: [upstream] } = setup
    const tokens = await redeem(gateway, (await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'alice')).location)
    expect(jwtPayload(tokens.access_token)).toMatchObject({ sub: `entra:${TENANT}:9f8e7d6c-0000-4000-8000-000000000001`, groups: ['6f1c0a2e'] })
    const refused = await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'mallory')
    expect(new URL(refused.location!).searchParams.get('error')).toBe('access_denied')
    const failed = gateway.audit.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === 'federation.failed')
    expect(failed).toMatchObject([{ provider: 'entra', reason: 'not_allowed', detail: 'the tenant 11111111-2222-4333-8444-555555555555 is not in allow.tenants' }])
  })
})

describe('groups to route rules with opaque access tokens', () => {
  let setup: FederatedSetup | undefined
  afterEach(async () => { await setup?.close(); setup = undefined })

  it('access_token.claims reaches a claim condition through the opaque token\'s record as through a JWT', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }],
      {
        access_token: { audience: ['orders-api'], claims: ['groups'], format: 'opaque' },
        clients: [APP_CLIENT, { client_id: 'orders-api', client_secret: 'orders-api-secret-0123456789', grant_types: ['client_credentials'], scopes: [] }],
      },
      { routes: [
        { id: 'admin', path: '/api/admin/**', upstream: 'echo', auth: 'required', claims: { all: [{ claim: 'groups', contains: 'orders-admins' }] } },
        { id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' },
      ] })
    const { gateway, upstreams: [upstream] } = setup
    const alice = await redeem(gateway, (await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'alice')).location)
    const bob = await redeem(gateway, (await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'bob')).location)
    expect(String(alice.access_token)).not.toContain('.')
    const call = (token: unknown) => fetch(`${gateway.url}/api/admin/reports`, { headers: { authorization: `Bearer ${String(token)}` } })
    expect((await call(alice.access_token)).status).toBe(200)
    const refused = await call(bob.access_token)
    expect(refused.status).toBe(403)
    expect(await refused.json()).toMatchObject({ error: 'access_denied' })
    // RFC 7662: the resource server's introspection shows them too.
    const introspected = await fetch(`${gateway.url}/introspect`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from('orders-api:orders-api-secret-0123456789').toString('base64')}` },
      body: new URLSearchParams({ token: String(alice.access_token) }),
    })
    expect(await introspected.json()).toMatchObject({ active: true, sub: 'corp:alice', groups: ['staff', 'orders-admins'] })
  })
})

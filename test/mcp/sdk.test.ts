/**
 * Issue 19, end to end with the official TypeScript SDK: an MCP server with no auth code of its own behind
 * Portcullis, and the SDK's own client and OAuth client provider connecting through the gateway: 401, RFC
 * 9728 resource and RFC 8414 server discovery, authorization code + PKCE with `resource` (login and consent
 * by the test user), tool calls, a streamed result, a 403 step-up for a tool that needs more scope, refresh,
 * and refusal after revocation; a client registered in the YAML, one that registers itself (RFC 7591), and one
 * known by its Client ID Metadata Document.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { postForm } from '../support/authserver.js'
import { FormBrowser, loginAndConsent, responseParams } from '../support/browser.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { startMcpServer, type TestMcpServer } from '../support/mcp-server.js'
import { createTestCa } from '../support/tls.js'
import { closedPort } from '../support/upstream.js'

const ALICE = { username: 'alice', password: 'alice-password-0123' }
const CALLBACK = 'http://127.0.0.1:5173/callback'

/** The SDK's client side of OAuth, as an app implements it: here the "browser" is the test's login. */
class TestProvider implements OAuthClientProvider {
  saved: OAuthTokens | undefined
  verifier = ''
  /** Where the SDK last sent the user: the test signs in there. */
  authorizationUrl: URL | undefined
  /** Undefined: the SDK registers the client (RFC 7591) and saves what it got here. */
  registered: OAuthClientInformationMixed | undefined
  /** A Client ID Metadata Document URL: the SDK uses it as the client_id when the server supports them. */
  clientMetadataUrl: string | undefined
  constructor(private readonly clientId?: string) {}
  get redirectUrl(): string { return CALLBACK }
  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'SDK test client', redirect_uris: [CALLBACK], grant_types: ['authorization_code', 'refresh_token'], token_endpoint_auth_method: 'none' }
  }
  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.clientId !== undefined ? { client_id: this.clientId } : this.registered
  }
  saveClientInformation(information: OAuthClientInformationMixed): void { this.registered = information }
  /** RFC 6749 §10.12: the server requires state (require_state defaults to true). */
  state(): string { return randomBytes(16).toString('base64url') }
  tokens(): OAuthTokens | undefined { return this.saved }
  saveTokens(tokens: OAuthTokens): void { this.saved = tokens }
  redirectToAuthorization(url: URL): void { this.authorizationUrl = url }
  saveCodeVerifier(verifier: string): void { this.verifier = verifier }
  codeVerifier(): string { return this.verifier }
}

let gateway: RunningGateway & { issuer: string }
let mcp: TestMcpServer
let base: string
let documents: { url: string; fetches: number; close(): Promise<void> }
const ca = createTestCa()

/** An https server (the test CA's certificate) serving one client's metadata document at /client.json. */
async function startDocumentServer(): Promise<typeof documents> {
  const certificate = ca.issue('documents')
  const state = { fetches: 0 }
  const server = https.createServer({ cert: readFileSync(certificate.certFile), key: readFileSync(certificate.keyFile) }, (req, res) => {
    state.fetches++
    const { port } = server.address() as AddressInfo
    const url = `https://127.0.0.1:${port}/client.json`
    if (req.url !== '/client.json') return void res.writeHead(404).end()
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' })
    res.end(JSON.stringify({ client_id: url, client_name: 'Document client', redirect_uris: [CALLBACK],
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `https://127.0.0.1:${port}/client.json`,
    get fetches() { return state.fetches },
    close: async () => { server.closeAllConnections(); await new Promise<void>((resolve) => server.close(() => resolve())) },
  }
}

beforeAll(async () => {
  mcp = await startMcpServer()
  documents = await startDocumentServer()
  const port = await closedPort()
  base = `http://127.0.0.1:${port}`
  gateway = await startAuthServerGateway({
    // Client ID Metadata Documents; loopback allowed (and this CA trusted) for the test only.
    client_metadata_documents: { enabled: true, scopes: ['mcp:read', 'mcp:admin'], allow_private_addresses: true, ca_file: ca.caFile },
    // RFC 7591: clients nobody registered by hand register themselves (public, loopback callbacks, these scopes).
    registration: { enabled: true, policy: { client_types: ['public'], redirect_uris: ['loopback'], scopes: ['mcp:read', 'mcp:admin'] } },
    clients: [{ client_id: 'mcp-app', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'],
      redirect_uris: ['http://127.0.0.1/callback'], scopes: ['mcp:read', 'mcp:admin'] }],
    users: [ALICE],
  }, {
    server: { realm: 'mcp', public_url: base },
    upstreams: { orders: { url: mcp.url } },
    routes: [{ id: 'mcp', path: '/mcp', upstream: 'orders', scopes: { all: ['mcp:read'] },
      mcp: { tools: { delete_order: { scopes: { all: ['mcp:admin'] } } } } }],
    resources: [{ resource: `${base}/mcp`, routes: ['mcp'], resource_name: 'Orders MCP server' }],
    // MCP authorization: the server never receives the client's token.
    forward: { strip_authorization: true },
  }, { port })
})

afterAll(async () => {
  await gateway.close()
  await Promise.all([mcp.close(), documents.close()])
  ca.remove()
})

/** Signs alice in at the URL the SDK chose and consents; returns the code from the redirect. `scope` overrides the SDK's. */
async function signIn(provider: TestProvider, scope?: string): Promise<string> {
  const url = provider.authorizationUrl!
  expect(url.searchParams.get('resource')).toBe(`${base}/mcp`)
  expect(url.searchParams.get('code_challenge_method')).toBe('S256')
  if (scope !== undefined) url.searchParams.set('scope', scope)
  const browser = new FormBrowser(base)
  const done = await loginAndConsent(browser, await browser.get(url.toString()), ALICE)
  const params = responseParams(done.location)
  if (params.get('code') === null) throw new Error(`no code: ${done.status} ${done.location ?? done.text.slice(0, 300)}`)
  expect(params.get('iss')).toBe(gateway.issuer)
  return params.get('code')!
}

/** Connects the SDK client through the gateway, signing in when the SDK asks for it. */
async function connect(provider: TestProvider, scope?: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const url = new URL(`${base}/mcp`)
  let transport = new StreamableHTTPClientTransport(url, { authProvider: provider })
  let client = new Client({ name: 'sdk-test', version: '1.0.0' })
  try {
    await client.connect(transport)
    return { client, transport }
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error
  }
  await transport.finishAuth(await signIn(provider, scope))
  transport = new StreamableHTTPClientTransport(url, { authProvider: provider })
  client = new Client({ name: 'sdk-test', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

const text = (result: unknown) => ((result as { content: Array<{ text: string }> }).content[0]!.text)
const claimsOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { aud: unknown; scope: string; client_id: string }

describe('the MCP SDK client through the gateway', () => {
  it('discovers, authorizes with PKCE and resource, lists and calls tools; the server never sees a token', async () => {
    const provider = new TestProvider('mcp-app')
    const { client } = await connect(provider, 'mcp:read')
    expect(claimsOf(provider.saved!.access_token).aud).toBe(`${base}/mcp`)
    // The resource's metadata names the tools' scopes too (what a client may ask for up front).
    const metadata = await (await fetch(`${base}/.well-known/oauth-protected-resource/mcp`)).json() as { scopes_supported: string[] }
    expect(metadata.scopes_supported).toEqual(['mcp:read', 'mcp:admin'])
    expect((await client.listTools()).tools.map((tool) => tool.name).sort()).toEqual(['count', 'delete_order', 'echo'])
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'hello' } }))).toBe('hello')
    expect(mcp.authorizations.every((value) => value === undefined)).toBe(true)
    await client.close()
  })

  it('a client nobody registered registers itself (RFC 7591) and then works as a registered one', async () => {
    const provider = new TestProvider()
    const { client } = await connect(provider, 'mcp:read')
    const id = (provider.registered as { client_id: string }).client_id
    expect(id).toMatch(/^dcr_/)
    expect(claimsOf(provider.saved!.access_token)).toMatchObject({ aud: `${base}/mcp` })
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'registered' } }))).toBe('registered')
    await client.close()
  })

  it('a client known by its metadata document (its https URL is its client_id) authorizes and calls', async () => {
    const provider = new TestProvider()
    provider.clientMetadataUrl = documents.url
    const { client } = await connect(provider, 'mcp:read')
    expect((provider.registered as { client_id: string }).client_id).toBe(documents.url)
    expect(claimsOf(provider.saved!.access_token)).toMatchObject({ aud: `${base}/mcp`, client_id: documents.url })
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'by document' } }))).toBe('by document')
    expect(documents.fetches).toBe(1)
    await client.close()
  })

  it('streams progress notifications of a long tool call through the gateway intact', async () => {
    const provider = new TestProvider('mcp-app')
    const { client } = await connect(provider, 'mcp:read')
    const progress: number[] = []
    const result = await client.callTool({ name: 'count', arguments: { n: 5 } }, undefined, { onprogress: ({ progress: step }) => { progress.push(step) } })
    expect(text(result)).toBe('counted to 5')
    expect(progress).toEqual([1, 2, 3, 4, 5])
    await client.close()
  })

  it('a tool needing more scope: one 403 insufficient_scope naming every scope it needs; authorized for them, the call succeeds', async () => {
    const reader = new TestProvider('mcp-app')
    const { client } = await connect(reader, 'mcp:read')
    const before = mcp.calls.length
    // The SDK retries once with the challenge's scope (by refreshing, which cannot widen a grant), then gives up.
    await expect(client.callTool({ name: 'delete_order', arguments: { id: '7' } })).rejects.toThrow(/403/)
    expect(mcp.calls.slice(before)).not.toContain('delete_order')
    const res = await fetch(`${base}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${reader.saved!.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'delete_order', arguments: { id: '7' } } }),
    })
    expect(res.status).toBe(403)
    const challenge = res.headers.get('www-authenticate')!
    expect(challenge).toContain('error="insufficient_scope"')
    expect(challenge).toContain(`resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`)
    const needed = /scope="([^"]+)"/.exec(challenge)![1]!
    expect(needed.split(' ').sort()).toEqual(['mcp:admin', 'mcp:read'])
    // Step-up: the app authorizes again for what the challenge named.
    const admin = new TestProvider('mcp-app')
    const { client: adminClient } = await connect(admin, needed)
    expect(claimsOf(admin.saved!.access_token).scope.split(' ').sort()).toEqual(['mcp:admin', 'mcp:read'])
    expect(text(await adminClient.callTool({ name: 'delete_order', arguments: { id: '7' } }))).toBe('deleted 7')
    await Promise.all([client.close(), adminClient.close()])
  })

  it('step-up with the SDK as it is: a client that registered itself for mcp:read gets a 403, the SDK asks /authorize for both scopes, the admin tool answers', async () => {
    // An app that keeps no refresh token (it registers for authorization_code only): on the 403 the SDK starts a
    // new authorization with the challenge's scope, with the client_id it registered for mcp:read alone.
    const provider = new TestProvider()
    Object.defineProperty(provider, 'clientMetadata', {
      get: () => ({ client_name: 'SDK step-up client', redirect_uris: [CALLBACK], grant_types: ['authorization_code'], token_endpoint_auth_method: 'none' }),
    })
    const { client } = await connect(provider)
    const registered = provider.registered as { client_id: string; scope?: string }
    expect(registered.client_id).toMatch(/^dcr_/)
    expect(registered.scope).toBe('mcp:read')
    expect(claimsOf(provider.saved!.access_token).scope).toBe('mcp:read')
    const before = mcp.calls.length
    await expect(client.callTool({ name: 'delete_order', arguments: { id: '9' } })).rejects.toBeInstanceOf(UnauthorizedError)
    expect(mcp.calls.slice(before)).not.toContain('delete_order')
    // The SDK sent the user to /authorize for what the 403 named, as the same registered client.
    expect(provider.authorizationUrl!.searchParams.get('client_id')).toBe(registered.client_id)
    expect(provider.authorizationUrl!.searchParams.get('scope')!.split(' ').sort()).toEqual(['mcp:admin', 'mcp:read'])
    // The user signs in and consents (the consent page names mcp:admin); the SDK redeems the code.
    const url = new URL(`${base}/mcp`)
    await new StreamableHTTPClientTransport(url, { authProvider: provider }).finishAuth(await signIn(provider))
    expect(claimsOf(provider.saved!.access_token).scope.split(' ').sort()).toEqual(['mcp:admin', 'mcp:read'])
    const stepped = new Client({ name: 'sdk-test', version: '1.0.0' })
    await stepped.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }))
    expect(text(await stepped.callTool({ name: 'delete_order', arguments: { id: '9' } }))).toBe('deleted 9')
    await Promise.all([client.close(), stepped.close()])
  })

  it('refreshes when the access token is revoked, and is refused once the grant is revoked', async () => {
    const provider = new TestProvider('mcp-app')
    const { client } = await connect(provider, 'mcp:read')
    const first = provider.saved!
    expect(first.refresh_token).toBeDefined()
    await postForm(gateway, '/revoke', { token: first.access_token, client_id: 'mcp-app' })
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'after refresh' } }))).toBe('after refresh')
    expect(provider.saved!.access_token).not.toBe(first.access_token)
    await postForm(gateway, '/revoke', { token: provider.saved!.refresh_token!, token_type_hint: 'refresh_token', client_id: 'mcp-app' })
    await postForm(gateway, '/revoke', { token: provider.saved!.access_token, client_id: 'mcp-app' })
    const before = mcp.calls.length
    await expect(client.callTool({ name: 'echo', arguments: { text: 'refused' } })).rejects.toThrow()
    expect(mcp.calls.length).toBe(before)
    const refresh = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: provider.saved!.refresh_token!, client_id: 'mcp-app' })
    expect(refresh.body.error).toBe('invalid_grant')
    await client.close()
  })
})

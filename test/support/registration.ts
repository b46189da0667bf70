/** Dynamic client registration (RFC 7591 / RFC 7592) as a client sends it, and the fixture of the as-registration suites. */
import * as oauth from 'oauth4webapi'
import { expect } from 'vitest'
import type { ArtifactRecord } from '../../src/authserver/storage/adapter.js'
import { ALICE, R1, callApi, type OAuthResponse } from './authserver.js'
import { field, type FormBrowser, type PageResponse } from './browser.js'
import type { RunningGateway } from './gateway.js'

/** A native app's loopback redirect URI (RFC 8252 §7.3): registered without a port, used with any. */
export const LOOPBACK = 'http://127.0.0.1/callback'
export const IAT = 'initial-access-token-0123456789'
export const RS = { client_id: 'orders-api', client_secret: 'rs-secret-0123456789abc' }

/**
 * A YAML public client `spa` and the resource server `orders-api` (audience of the tokens), alice, and
 * registration enabled with `registration` merged over `{ enabled: true, policy: { scopes: [orders:read, orders:write] } }`.
 */
export function registrationSetup(registration: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { policy, ...rest } = registration as { policy?: Record<string, unknown> }
  return {
    access_token: { audience: [RS.client_id] },
    clients: [
      { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: ['orders:read'] },
      { ...RS, grant_types: ['client_credentials'], scopes: [] },
    ],
    users: [{ ...ALICE, claims: { name: 'Alice' } }],
    registration: { enabled: true, ...rest, policy: { scopes: ['orders:read', 'orders:write'], ...policy } },
    ...extra,
  }
}

async function answer(res: Response): Promise<OAuthResponse> {
  const text = await res.text()
  let body: Record<string, unknown> = {}
  try { body = text === '' ? {} : JSON.parse(text) as Record<string, unknown> } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, body, text }
}

/** POST {issuer}/register: `metadata` as JSON (a string is sent as it is), with the initial access token when given. */
export async function register(gateway: RunningGateway, metadata: unknown, options: { token?: string; headers?: Record<string, string> } = {}): Promise<OAuthResponse> {
  return answer(await fetch(`${gateway.url}/register`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(options.token !== undefined && { authorization: `Bearer ${options.token}` }),
      ...options.headers,
    },
    body: typeof metadata === 'string' ? metadata : JSON.stringify(metadata),
    redirect: 'manual',
  }))
}

/** An RFC 7592 request to a registration_client_uri with a registration access token (none when undefined). */
export async function manage(uri: string, method: 'GET' | 'DELETE' | 'PUT' | 'PATCH', token: string | undefined, body: unknown = {}): Promise<OAuthResponse> {
  const sendsBody = method === 'PUT' || method === 'PATCH'
  return answer(await fetch(uri, {
    method,
    headers: { ...(token !== undefined && { authorization: `Bearer ${token}` }), ...(sendsBody && { 'content-type': 'application/json' }) },
    ...(sendsBody && { body: JSON.stringify(body) }),
    redirect: 'manual',
  }))
}

/** A public native client with the loopback redirect URI, asking for orders:read. */
export const NATIVE_APP = {
  client_name: 'Native CLI', redirect_uris: [LOOPBACK], token_endpoint_auth_method: 'none',
  grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], scope: 'orders:read',
}

/** Every registration the gateway's store holds (a refused request must leave this unchanged). */
export async function storedRegistrations(gateway: RunningGateway): Promise<ArtifactRecord[]> {
  return gateway.app.authServer!.ctx.store.list('registered_client')
}

/** The audit events of that name the gateway wrote. */
export function auditEvents(gateway: RunningGateway, event: string): Array<Record<string, unknown>> {
  return gateway.audit.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === event)
}

/**
 * A public client's end of the code flow once the consent page is shown: allow, redeem the code with PKCE,
 * call the API (its X-Auth-Client-Id must be `clientId`), refresh, call again. Returns the first tokens.
 */
export async function allowRedeemAndRefresh(t: {
  gateway: RunningGateway; browser: FormBrowser; consent: PageResponse; as: oauth.AuthorizationServer; client: oauth.Client
  redirectUri: string; state: string; verifier: string; scope: string
}): Promise<oauth.TokenEndpointResponse> {
  const insecure = { [oauth.allowInsecureRequests]: true }
  const callback = await t.browser.post('/consent', { _csrf: field(t.consent, '_csrf'), interaction: field(t.consent, 'interaction'), decision: 'allow' })
  expect(callback.location?.startsWith(`${t.redirectUri}?`)).toBe(true)
  const params = oauth.validateAuthResponse(t.as, t.client, new URL(callback.location!), t.state)
  const tokens = await oauth.processAuthorizationCodeResponse(t.as, t.client,
    await oauth.authorizationCodeGrantRequest(t.as, t.client, oauth.None(), params, t.redirectUri, t.verifier, insecure))
  expect(tokens).toMatchObject({ token_type: 'bearer', scope: t.scope })
  const api = await callApi(t.gateway, tokens.access_token)
  expect(api.status).toBe(200)
  expect((await api.json() as { headers: Record<string, string> }).headers['x-auth-client-id']).toBe(t.client.client_id)
  const refreshed = await oauth.processRefreshTokenResponse(t.as, t.client,
    await oauth.refreshTokenGrantRequest(t.as, t.client, oauth.None(), tokens.refresh_token!, insecure))
  expect((await callApi(t.gateway, refreshed.access_token)).status).toBe(200)
  return tokens
}

/**
 * An authorization request URL on `issuer` for `clientId` (PKCE S256, state, `scope`, default orders:read, and a
 * `resource` parameter per entry of `resources`); with its verifier and state.
 */
export async function authorizationUrl(issuer: string, clientId: string, redirectUri = 'http://127.0.0.1:51004/callback',
  { scope = 'orders:read', resources = [] }: { scope?: string; resources?: readonly string[] } = {}) {
  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const url = new URL(`${issuer}/authorize`)
  for (const [name, value] of Object.entries({
    response_type: 'code', client_id: clientId, redirect_uri: redirectUri, scope, state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
  })) url.searchParams.set(name, value)
  for (const resource of resources) url.searchParams.append('resource', resource)
  return { url: url.href, verifier, state, redirectUri }
}

/** Requests to the embedded authorization server, as a client would send them. */
import type { RunningGateway } from './gateway.js'

export interface OAuthResponse {
  status: number
  headers: Headers
  body: Record<string, unknown>
  text: string
}

export function basic(clientId: string, secret: string): string {
  const encode = (value: string) => encodeURIComponent(value).replace(/%20/g, '+')
  return 'Basic ' + Buffer.from(`${encode(clientId)}:${encode(secret)}`).toString('base64')
}

/** POST a form to an endpoint of the gateway's embedded server. */
export async function postForm(gateway: RunningGateway, path: string, form: Record<string, string>,
  headers: Record<string, string> = {}): Promise<OAuthResponse> {
  const res = await fetch(`${gateway.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(form).toString(),
    redirect: 'manual',
  })
  const text = await res.text()
  let body: Record<string, unknown> = {}
  try { body = text === '' ? {} : JSON.parse(text) as Record<string, unknown> } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, body, text }
}

/** A bearer request through the gateway's proxy. */
export async function callApi(gateway: RunningGateway, token: string, path = '/api/orders'): Promise<Response> {
  return fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${token}` } })
}

/** The RFC 8628 §3.2 device authorization response (DA-02). */
export interface DeviceAuthorization {
  device_code: string
  user_code: string
  verification_uri: string
  verification_uri_complete: string
  expires_in: number
  interval: number
}

/** The checklist's registered redirect URI R1. */
export const R1 = 'https://app.example.com/callback'
/** PKCE test vectors: TV-1 (RFC 7636 Appendix B) and TV-2 (OAuth 2.1 draft-15 §4.1.1). */
export const TV1 = { verifier: 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk', challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM' }
export const TV2 = { verifier: '3641a2d12d66101249cdf7a79c000c1f8c05d2aafcf14bf146497bed', challenge: '6fdkQaPm51l13DSukcAH3Mdx7_ntecHYd1vi3n0hMZY' }

/** The first-party test client and user of {@link passwordSetup}. */
export const APP = { client_id: 'first-party-app', client_secret: 'app-secret-0123456789' }
export const OTHER = { client_id: 'other-app', client_secret: 'other-secret-0123456789' }
export const RS = { client_id: 'resource-server', client_secret: 'rs-secret-0123456789abc' }
export const ALICE = { username: 'alice', password: 'correct horse battery staple' }

/**
 * Clients that can get refresh tokens without a browser (the password grant), a second such client,
 * a confidential client_credentials client, a public client, and the user alice.
 */
export function passwordSetup(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    access_token: { audience: ['orders-api'] },
    clients: [
      { ...APP, token_endpoint_auth_method: 'client_secret_post', grant_types: ['password', 'refresh_token'], first_party: true,
        scopes: ['orders:read', 'orders:write', 'profile'] },
      { ...OTHER, grant_types: ['password', 'refresh_token'], first_party: true, scopes: ['orders:read'] },
      { ...RS, grant_types: ['client_credentials'], scopes: ['orders:read'] },
      { client_id: 'public-app', token_endpoint_auth_method: 'none', grant_types: ['refresh_token', 'authorization_code'],
        redirect_uris: ['https://app.example.com/callback'], scopes: ['orders:read'] },
    ],
    users: [{ ...ALICE, claims: { name: 'Alice' } }],
    ...extra,
  }
}

/** Password grant for alice through APP (client_secret_post), returning the token response. */
export function passwordGrant(gateway: RunningGateway, scope?: string, client = APP): Promise<OAuthResponse> {
  return postForm(gateway, '/token', {
    grant_type: 'password', ...ALICE, ...client, ...(scope !== undefined && { scope }),
  })
}

/** The seed's refresh request, exactly: grant_type, refresh_token, client_id, client_secret in the form. */
export function refresh(gateway: RunningGateway, refreshToken: string, client = APP, scope?: string): Promise<OAuthResponse> {
  return postForm(gateway, '/token', {
    grant_type: 'refresh_token', refresh_token: refreshToken, ...client, ...(scope !== undefined && { scope }),
  })
}

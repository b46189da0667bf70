/**
 * The embedded server's token endpoint through the real gateway on loopback (checklist §0, §1, §3, §3.4,
 * §3.5, TV-3..TV-5): client authentication, the common /token rules, client_credentials and password,
 * and brute-force throttling. oauth4webapi, a strict client, drives the client_credentials happy paths.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { hashSecret } from '../../src/crypto/secret-hash.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'

type AuthServerGateway = RunningGateway & { issuer: string }

const SVC_SECRET = 'svc-secret-0123456789'
const POST_SECRET = 'post-secret-0123456789'
const FP_SECRET = 'first-party-secret-0123'
const WEB_SECRET = 'web-secret-0123456789'
const ODD_SECRET = 'some secure & non-standard secret'
/** TV-3: U+0020 U+0025 U+0026 U+002B U+00A3 U+20AC, padded to the 16 characters a plain secret needs. */
const TV3_SECRET = 'tv3-secret- %&+£€'
const ALICE_PASSWORD = 'correct horse battery staple'
const BOB_PASSWORD = 'bob-password-123'
const R1 = 'https://app.example.com/callback'

const clients = async (): Promise<Record<string, unknown>[]> => [
  { client_id: 'svc', client_secret: SVC_SECRET, token_endpoint_auth_method: 'client_secret_basic', grant_types: ['client_credentials'],
    scopes: ['orders:read', 'orders:write', 'openid'] },
  { client_id: 'svc-post', client_secret: POST_SECRET, token_endpoint_auth_method: 'client_secret_post', grant_types: ['client_credentials'],
    scopes: ['orders:read'] },
  { client_id: 'an:identifier', client_secret: ODD_SECRET, grant_types: ['client_credentials'], scopes: ['orders:read'] },
  { client_id: 'tv3', client_secret: TV3_SECRET, token_endpoint_auth_method: 'client_secret_post', grant_types: ['client_credentials'], scopes: [] },
  // TV-4 a: the RFC's secret is shorter than a plain secret may be, so it is registered by its hash.
  { client_id: 's6BhdRkqt3', client_secret_hash: await hashSecret('gX1fBat3bV'), grant_types: ['client_credentials'], scopes: ['orders:read'] },
  { client_id: 'web', client_secret: WEB_SECRET, grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: ['openid'] },
  { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1],
    scopes: ['openid', 'orders:read'] },
  { client_id: 'fp', client_secret: FP_SECRET, first_party: true, grant_types: ['password', 'refresh_token'],
    scopes: ['openid', 'orders:read', 'orders:write'] },
]

const users = async (): Promise<Record<string, unknown>[]> => [
  { username: 'alice', sub: 'user-alice', password: ALICE_PASSWORD },
  { username: 'bob', password_hash: await hashSecret(BOB_PASSWORD) },
]

/** RFC 6749 App. B (TV-3): what strict clients put in bodies and Basic credentials. */
function formEncode(value: string): string {
  return encodeURIComponent(value).replace(/%20/g, '+').replace(/[!'()*~._-]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

function basic(clientId: string, secret: string): string {
  return `Basic ${Buffer.from(`${formEncode(clientId)}:${formEncode(secret)}`).toString('base64')}`
}

function form(fields: Record<string, string>): string {
  return Object.entries(fields).map(([name, value]) => `${formEncode(name)}=${formEncode(value)}`).join('&')
}

interface Sent { status: number; headers: Headers; body: Record<string, unknown> | undefined; text: string }

async function post(gateway: AuthServerGateway, body: string, headers: Record<string, string> = {}, path = '/token'): Promise<Sent> {
  const res = await fetch(`${gateway.url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body,
  })
  const text = await res.text()
  let parsed: Record<string, unknown> | undefined
  try { parsed = JSON.parse(text) as Record<string, unknown> } catch { parsed = undefined }
  return { status: res.status, headers: res.headers, body: parsed, text }
}

/** G-03, G-04, T-05: a JSON error body with no-store, and the status that goes with the code. */
function expectError(sent: Sent, status: number, error: string): void {
  expect({ status: sent.status, error: sent.body?.error }).toEqual({ status, error })
  expect(sent.headers.get('content-type')).toMatch(/^application\/json/)
  expect(sent.headers.get('cache-control')).toBe('no-store')
  expect(sent.headers.get('pragma')).toBe('no-cache')
  expect(Object.values(sent.body!)).not.toContain(null)
  // RFC 6749 §5.2: error and error_description stay within %x20-21 / %x23-5B / %x5D-7E.
  for (const member of ['error', 'error_description']) {
    const value = sent.body![member]
    if (value !== undefined) expect(value).toMatch(/^[\x20\x21\x23-\x5b\x5d-\x7e]*$/)
  }
}

function authorizationServer(gateway: AuthServerGateway): oauth.AuthorizationServer {
  return { issuer: gateway.issuer, token_endpoint: `${gateway.issuer}/token` }
}

const insecure = { [oauth.allowInsecureRequests]: true }

let gateway: AuthServerGateway
beforeAll(async () => {
  gateway = await startAuthServerGateway({
    clients: await clients(),
    users: await users(),
    access_token: { ttl: '15m' },
    // High enough that nothing in the shared suite is throttled; the CA-09 and PW-04 tests boot their own.
    throttling: { failures_per_client: 1000, failures_per_ip: 1000 },
  })
})
afterAll(() => gateway.close())

describe('client_credentials through a strict client (oauth4webapi)', () => {
  it('CA-01 client_secret_basic: a strict client gets a token', async () => {
    const client: oauth.Client = { client_id: 'svc' }
    const response = await oauth.clientCredentialsGrantRequest(authorizationServer(gateway), client, oauth.ClientSecretBasic(SVC_SECRET),
      new URLSearchParams({ scope: 'orders:read' }), insecure)
    const result = await oauth.processClientCredentialsResponse(authorizationServer(gateway), client, response)
    expect(result.token_type).toBe('bearer')
    expect(result.scope).toBe('orders:read')
    expect(result.expires_in).toBe(900)
  })

  it('CA-01 client_secret_basic: form-encoded credentials with ":", "&" and spaces (TV-4 d) authenticate', async () => {
    const client: oauth.Client = { client_id: 'an:identifier' }
    const response = await oauth.clientCredentialsGrantRequest(authorizationServer(gateway), client, oauth.ClientSecretBasic(ODD_SECRET),
      new URLSearchParams(), insecure)
    const result = await oauth.processClientCredentialsResponse(authorizationServer(gateway), client, response)
    expect(decodeJwt(result.access_token).sub).toBe('an:identifier')
  })

  it('CA-03 client_secret_post: a strict client gets a token', async () => {
    const client: oauth.Client = { client_id: 'svc-post' }
    const response = await oauth.clientCredentialsGrantRequest(authorizationServer(gateway), client, oauth.ClientSecretPost(POST_SECRET),
      new URLSearchParams(), insecure)
    const result = await oauth.processClientCredentialsResponse(authorizationServer(gateway), client, response)
    expect(result.access_token).not.toBe('')
    expect(result.scope).toBe('orders:read')
  })

  it('CA-04 a client registered for basic authenticates with post, and one registered for post with basic', async () => {
    for (const [clientId, auth] of [['svc', oauth.ClientSecretPost(SVC_SECRET)], ['svc-post', oauth.ClientSecretBasic(POST_SECRET)]] as const) {
      const client: oauth.Client = { client_id: clientId }
      const response = await oauth.clientCredentialsGrantRequest(authorizationServer(gateway), client, auth, new URLSearchParams(), insecure)
      const result = await oauth.processClientCredentialsResponse(authorizationServer(gateway), client, response)
      expect(decodeJwt(result.access_token).client_id).toBe(clientId)
    }
  })

  it('CA-06 a strict client sees the wrong secret as a Basic challenge (401 invalid_client)', async () => {
    const client: oauth.Client = { client_id: 'svc' }
    const response = await oauth.clientCredentialsGrantRequest(authorizationServer(gateway), client, oauth.ClientSecretBasic('wrong-secret'),
      new URLSearchParams(), insecure)
    const failure = await oauth.processClientCredentialsResponse(authorizationServer(gateway), client, response).catch((error: unknown) => error)
    expect(failure).toBeInstanceOf(oauth.WWWAuthenticateChallengeError)
    const challenge = (failure as oauth.WWWAuthenticateChallengeError).cause[0]!
    expect(challenge.scheme).toBe('basic')
    expect(challenge.parameters.realm).toBe(gateway.issuer)
    expect(challenge.parameters.error).toBe('invalid_client')
  })

  it('CA-06 a strict client posting a wrong secret gets a parseable 401 invalid_client body', async () => {
    const client: oauth.Client = { client_id: 'svc-post' }
    const response = await oauth.clientCredentialsGrantRequest(authorizationServer(gateway), client, oauth.ClientSecretPost('wrong-secret'),
      new URLSearchParams(), insecure)
    const failure = await oauth.processClientCredentialsResponse(authorizationServer(gateway), client, response).catch((error: unknown) => error)
    expect(failure).toBeInstanceOf(oauth.ResponseBodyError)
    expect((failure as oauth.ResponseBodyError).error).toBe('invalid_client')
    expect((failure as oauth.ResponseBodyError).status).toBe(401)
  })
})

describe('/token common rules (§0, §3)', () => {
  const ok = () => ({ authorization: basic('svc', SVC_SECRET) })

  it('T-04 success is 200 JSON with access_token, token_type Bearer, integer expires_in equal to the TTL, and scope', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials&scope=orders%3Aread+orders%3Awrite', ok())
    expect(sent.status).toBe(200)
    expect(sent.headers.get('content-type')).toMatch(/^application\/json/)
    expect(sent.body).toEqual({ access_token: expect.any(String), token_type: 'Bearer', expires_in: 900, scope: 'orders:read orders:write' })
    expect(Number.isInteger(sent.body!.expires_in)).toBe(true)
    expect(sent.body!.access_token).not.toBe('')
  })

  it('G-04 a success carries Cache-Control: no-store and Pragma: no-cache', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials', ok())
    expect(sent.status).toBe(200)
    expect(sent.headers.get('cache-control')).toBe('no-store')
    expect(sent.headers.get('pragma')).toBe('no-cache')
  })

  it('TV-5 the §4.4 request body grant_type=client_credentials with Basic answers 200 with the §5.1 headers', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials', { authorization: 'Basic czZCaGRSa3F0MzpnWDFmQmF0M2JW' })
    expect(sent.status).toBe(200)
    expect(sent.headers.get('cache-control')).toBe('no-store')
    expect(sent.headers.get('pragma')).toBe('no-cache')
    expect(decodeJwt(sent.body!.access_token as string).sub).toBe('s6BhdRkqt3')
  })

  it('TV-5 the §5.2 error example: 400 {"error":"invalid_request"} with JSON, no-store and no-cache', async () => {
    const sent = await post(gateway, '', ok())
    expectError(sent, 400, 'invalid_request')
  })

  it('G-05 a charset parameter on the form content type is accepted', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials', { ...ok(), 'content-type': 'application/x-www-form-urlencoded;charset=UTF-8' })
    expect(sent.status).toBe(200)
  })

  it('G-05 a JSON body → 400 invalid_request', async () => {
    const sent = await post(gateway, JSON.stringify({ grant_type: 'client_credentials' }), { ...ok(), 'content-type': 'application/json' })
    expectError(sent, 400, 'invalid_request')
  })

  it('G-05 a text/plain or multipart body → 400 invalid_request', async () => {
    expectError(await post(gateway, 'grant_type=client_credentials', { ...ok(), 'content-type': 'text/plain' }), 400, 'invalid_request')
    expectError(await post(gateway, '--x\r\n\r\n--x--', { ...ok(), 'content-type': 'multipart/form-data; boundary=x' }), 400, 'invalid_request')
  })

  it('TV-3 a client_secret_post secret with space, %, &, +, £ and € decodes per RFC 6749 App. B', async () => {
    expect(formEncode(' %&+£€')).toBe('+%25%26%2B%C2%A3%E2%82%AC')
    const sent = await post(gateway, `grant_type=client_credentials&client_id=tv3&client_secret=${formEncode(TV3_SECRET)}`)
    expect(sent.status).toBe(200)
    // A raw "+" is a space, not a plus: the same secret with %2B written as "+" is a different secret.
    const plusAsSpace = await post(gateway, `grant_type=client_credentials&client_id=tv3&client_secret=${formEncode(TV3_SECRET).replace('%2B', '+')}`)
    expectError(plusAsSpace, 401, 'invalid_client')
  })

  it('G-06 a repeated parameter → 400 invalid_request', async () => {
    expectError(await post(gateway, 'grant_type=client_credentials&grant_type=client_credentials', ok()), 400, 'invalid_request')
    expectError(await post(gateway, 'grant_type=client_credentials&scope=orders%3Aread&scope=orders%3Aread', ok()), 400, 'invalid_request')
  })

  it('G-06 a parameter with an empty value counts as omitted, and unknown parameters are ignored', async () => {
    expectError(await post(gateway, 'grant_type=', ok()), 400, 'invalid_request')
    const sent = await post(gateway, 'grant_type=client_credentials&scope=&foo=bar', ok())
    expect(sent.status).toBe(200)
    expect(sent.body!.scope).toBe('orders:read orders:write')
  })

  it('G-07 credentials in the query string → 400 invalid_request, even with a valid body', async () => {
    for (const name of ['client_secret', 'refresh_token', 'password', 'code']) {
      expectError(await post(gateway, 'grant_type=client_credentials', ok(), `/token?${name}=x`), 400, 'invalid_request')
    }
    expect((await post(gateway, 'grant_type=client_credentials', ok(), '/token?unrelated=1')).status).toBe(200)
  })

  it('G-11 any other method → 405 with Allow: POST (OPTIONS is the G-12 CORS preflight)', async () => {
    for (const method of ['GET', 'PUT', 'DELETE', 'PATCH']) {
      const res = await fetch(`${gateway.url}/token`, { method, redirect: 'manual' })
      expect(res.status, method).toBe(405)
      expect(res.headers.get('allow'), method).toBe('POST')
    }
    const head = await fetch(`${gateway.url}/token`, { method: 'HEAD', redirect: 'manual' })
    expect(head.status).toBe(405)
  })

  it('G-08 the trailing-slash variant never redirects', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials', ok(), '/token/')
    expect(sent.status >= 300 && sent.status < 400).toBe(false)
    expect(sent.headers.get('location')).toBeNull()
  })

  it('T-02 grant_type missing → 400 invalid_request', async () => {
    expectError(await post(gateway, 'scope=orders%3Aread', ok()), 400, 'invalid_request')
  })

  it('T-02 an unknown grant_type → 400 unsupported_grant_type', async () => {
    expectError(await post(gateway, 'grant_type=magic', ok()), 400, 'unsupported_grant_type')
    expectError(await post(gateway, `grant_type=${formEncode('urn:ietf:params:oauth:grant-type:jwt-bearer')}`, ok()), 400, 'unsupported_grant_type')
  })

  it('T-02 grant_type=implicit → 400 unsupported_grant_type', async () => {
    expectError(await post(gateway, 'grant_type=implicit', ok()), 400, 'unsupported_grant_type')
  })

  it('T-03 a supported grant the client is not registered for → 400 unauthorized_client', async () => {
    expectError(await post(gateway, 'grant_type=client_credentials', { authorization: basic('web', WEB_SECRET) }), 400, 'unauthorized_client')
  })

  it('T-05 every error is 400 except invalid_client, which is 401', async () => {
    expectError(await post(gateway, 'grant_type=client_credentials&scope=admin', ok()), 400, 'invalid_scope')
    expectError(await post(gateway, 'grant_type=client_credentials', { authorization: basic('svc', 'nope') }), 401, 'invalid_client')
  })

  it('T-06 a scope that breaks the scope-token syntax → 400 invalid_scope', async () => {
    for (const scope of ['orders:read  orders:write', ' orders:read', 'orders:read ', 'a"b', 'a\\b', 'é']) {
      expectError(await post(gateway, form({ grant_type: 'client_credentials', scope }), ok()), 400, 'invalid_scope')
    }
  })
})

describe('client authentication (§1)', () => {
  it('CA-02 the Basic scheme name is matched case-insensitively', async () => {
    const credentials = basic('svc', SVC_SECRET).slice('Basic '.length)
    for (const scheme of ['basic', 'BASIC', 'bAsIc']) {
      expect((await post(gateway, 'grant_type=client_credentials', { authorization: `${scheme} ${credentials}` })).status).toBe(200)
    }
  })

  it('CA-02 malformed base64, no ":" or a bad %-sequence in Basic credentials → 400 invalid_request', async () => {
    for (const authorization of ['Basic ***', `Basic ${Buffer.from('svc').toString('base64')}`,
      `Basic ${Buffer.from('foo with %:foo with $').toString('base64')}`]) {
      expectError(await post(gateway, 'grant_type=client_credentials', { authorization }), 400, 'invalid_request')
    }
  })

  it('CA-05 two authentication mechanisms in one request → 400 invalid_request', async () => {
    const sent = await post(gateway, form({ grant_type: 'client_credentials', client_id: 'svc', client_secret: SVC_SECRET }),
      { authorization: basic('svc', SVC_SECRET) })
    expectError(sent, 400, 'invalid_request')
  })

  it('CA-05 a body client_id that differs from the Basic client_id → 400 invalid_request', async () => {
    const sent = await post(gateway, form({ grant_type: 'client_credentials', client_id: 'svc-post' }), { authorization: basic('svc', SVC_SECRET) })
    expectError(sent, 400, 'invalid_request')
  })

  it('CA-06 an unknown client or a wrong secret by Basic → 401 invalid_client with WWW-Authenticate: Basic realm="<ISS>"', async () => {
    for (const authorization of [basic('nobody', SVC_SECRET), basic('svc', 'wrong-secret'), basic('svc', '')]) {
      const sent = await post(gateway, 'grant_type=client_credentials', { authorization })
      expectError(sent, 401, 'invalid_client')
      expect(sent.headers.get('www-authenticate')).toBe(`Basic realm="${gateway.issuer}", error="invalid_client"`)
    }
  })

  it('CA-06 an unknown client or a wrong secret in the body → 401 invalid_client without a Basic challenge', async () => {
    for (const fields of [{ client_id: 'nobody', client_secret: SVC_SECRET }, { client_id: 'svc', client_secret: 'wrong-secret' }]) {
      const sent = await post(gateway, form({ grant_type: 'client_credentials', ...fields }))
      expectError(sent, 401, 'invalid_client')
      expect(sent.headers.get('www-authenticate')).toBeNull()
    }
  })

  it('CA-06 a confidential client with no credentials → 401 invalid_client', async () => {
    expectError(await post(gateway, form({ grant_type: 'client_credentials', client_id: 'svc' })), 401, 'invalid_client')
    expectError(await post(gateway, form({ grant_type: 'client_credentials' })), 401, 'invalid_client')
  })

  it('CA-06 a none client that sends a secret → 401 invalid_client', async () => {
    expectError(await post(gateway, form({ grant_type: 'refresh_token', refresh_token: 'x', client_id: 'spa', client_secret: 'anything-at-all' })),
      401, 'invalid_client')
    expectError(await post(gateway, form({ grant_type: 'refresh_token', refresh_token: 'x' }), { authorization: basic('spa', '') }),
      401, 'invalid_client')
  })

  it('CA-07 a public client identifies itself with client_id only and reaches the grant', async () => {
    // The refresh token is unknown: invalid_grant shows that client identification itself succeeded.
    expectError(await post(gateway, form({ grant_type: 'refresh_token', refresh_token: 'prt_unknown', client_id: 'spa' })), 400, 'invalid_grant')
  })

  it('CA-10 a client registered by its scrypt hash authenticates (TV-4 a against the real server)', async () => {
    expect((await post(gateway, 'grant_type=client_credentials', { authorization: 'Basic czZCaGRSa3F0MzpnWDFmQmF0M2JW' })).status).toBe(200)
    expectError(await post(gateway, 'grant_type=client_credentials', { authorization: basic('s6BhdRkqt3', 'gX1fBat3bW') }), 401, 'invalid_client')
  })
})

describe('grant_type=client_credentials (§3.4)', () => {
  const svc = { authorization: basic('svc', SVC_SECRET) }

  it('CC-01 a public client → 400 unauthorized_client', async () => {
    expectError(await post(gateway, form({ grant_type: 'client_credentials', client_id: 'spa' })), 400, 'unauthorized_client')
  })

  it('CC-01 missing authentication → 401 invalid_client', async () => {
    expectError(await post(gateway, form({ grant_type: 'client_credentials', client_id: 'svc-post' })), 401, 'invalid_client')
  })

  it('CC-02 a subset of the registered scopes is granted as asked', async () => {
    const sent = await post(gateway, form({ grant_type: 'client_credentials', scope: 'orders:write' }), svc)
    expect(sent.body!.scope).toBe('orders:write')
    expect(decodeJwt(sent.body!.access_token as string).scope).toBe('orders:write')
  })

  it('CC-02 a scope outside the registration → 400 invalid_scope', async () => {
    expectError(await post(gateway, form({ grant_type: 'client_credentials', scope: 'orders:read admin' }), svc), 400, 'invalid_scope')
  })

  it('CC-02 scope omitted → every registered scope except openid', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials', svc)
    expect(sent.body!.scope).toBe('orders:read orders:write')
  })

  it('CC-02 openid → 400 invalid_scope, even when registered', async () => {
    expectError(await post(gateway, form({ grant_type: 'client_credentials', scope: 'openid' }), svc), 400, 'invalid_scope')
    expectError(await post(gateway, form({ grant_type: 'client_credentials', scope: 'orders:read openid' }), svc), 400, 'invalid_scope')
  })

  it('CC-03 no refresh_token and no id_token in the response', async () => {
    const sent = await post(gateway, 'grant_type=client_credentials', svc)
    expect(sent.status).toBe(200)
    expect(sent.body).not.toHaveProperty('refresh_token')
    expect(sent.body).not.toHaveProperty('id_token')
  })

  it('CC-04 the JWT access token has sub = client_id and client_id = client_id, and the gateway accepts it', async () => {
    const sent = await post(gateway, form({ grant_type: 'client_credentials', scope: 'orders:read' }), svc)
    const claims = decodeJwt(sent.body!.access_token as string)
    expect(claims).toMatchObject({ iss: gateway.issuer, sub: 'svc', client_id: 'svc', scope: 'orders:read' })
    const api = await fetch(`${gateway.url}/api/orders`, { headers: { authorization: `Bearer ${sent.body!.access_token as string}` } })
    expect(api.status).toBe(200)
  })
})

describe('grant_type=password (§3.5)', () => {
  const fp = { authorization: basic('fp', FP_SECRET) }

  it('PW-02 a client not registered for password → 400 unauthorized_client', async () => {
    expectError(await post(gateway, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD }), { authorization: basic('svc', SVC_SECRET) }),
      400, 'unauthorized_client')
  })

  it('PW-03 the right password gives an access token for the user and, with refresh_token registered, a refresh token', async () => {
    const sent = await post(gateway, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD, scope: 'orders:read' }), fp)
    expect(sent.status).toBe(200)
    expect(sent.body).toMatchObject({ token_type: 'Bearer', expires_in: 900, scope: 'orders:read', refresh_token: expect.any(String) })
    const claims = decodeJwt(sent.body!.access_token as string)
    expect(claims).toMatchObject({ sub: 'user-alice', client_id: 'fp', scope: 'orders:read' })
    expect(claims.auth_time).toEqual(expect.any(Number))
    const hashed = await post(gateway, form({ grant_type: 'password', username: 'bob', password: BOB_PASSWORD }), fp)
    expect(hashed.status).toBe(200)
    expect(decodeJwt(hashed.body!.access_token as string).sub).toBe('bob')
  })

  it('PW-03 the refresh token of a password grant refreshes', async () => {
    const first = await post(gateway, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD }), fp)
    const refreshed = await post(gateway, form({ grant_type: 'refresh_token', refresh_token: first.body!.refresh_token as string }), fp)
    expect(refreshed.status).toBe(200)
    expect(decodeJwt(refreshed.body!.access_token as string).sub).toBe('user-alice')
  })

  it('PW-03 a confidential client must authenticate', async () => {
    expectError(await post(gateway, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD, client_id: 'fp' })), 401, 'invalid_client')
  })

  it('PW-03 username or password missing → 400 invalid_request', async () => {
    expectError(await post(gateway, form({ grant_type: 'password', username: 'alice' }), fp), 400, 'invalid_request')
    expectError(await post(gateway, form({ grant_type: 'password', password: ALICE_PASSWORD }), fp), 400, 'invalid_request')
  })

  it('PW-03 a wrong password and an unknown user get the same 400 invalid_grant', async () => {
    const wrongPassword = await post(gateway, form({ grant_type: 'password', username: 'alice', password: 'not-her-password' }), fp)
    const unknownUser = await post(gateway, form({ grant_type: 'password', username: 'mallory', password: 'not-her-password' }), fp)
    const hashedWrong = await post(gateway, form({ grant_type: 'password', username: 'bob', password: 'not-his-password' }), fp)
    expectError(wrongPassword, 400, 'invalid_grant')
    expect(unknownUser.text).toBe(wrongPassword.text)
    expect(hashedWrong.text).toBe(wrongPassword.text)
    expect([...unknownUser.headers.keys()]).toEqual([...wrongPassword.headers.keys()])
  })

  it('PW-03 a wrong password and an unknown user take about the same time', async () => {
    const median = async (username: string) => {
      const times: number[] = []
      for (let i = 0; i < 5; i++) {
        const started = performance.now()
        await post(gateway, form({ grant_type: 'password', username, password: 'not-the-password' }), fp)
        times.push(performance.now() - started)
      }
      return times.sort((a, b) => a - b)[2]!
    }
    const [known, unknown] = [await median('alice'), await median('nobody-at-all')]
    // Both cost one scrypt; a lookup-only path would be one or two orders of magnitude faster.
    expect(unknown / known).toBeGreaterThan(0.5)
    expect(unknown / known).toBeLessThan(2)
  })

  it('PW-03 scope is limited to the client’s scopes', async () => {
    expectError(await post(gateway, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD, scope: 'admin' }), fp), 400, 'invalid_scope')
  })
})

describe('brute force (CA-09, PW-04, PW-01)', () => {
  let limited: AuthServerGateway
  beforeAll(async () => {
    limited = await startAuthServerGateway({
      clients: (await clients()).filter((client) => client.client_id !== 'fp'),
      users: await users(),
      throttling: { failures_per_client: 3, failures_per_ip: 1000, window: '1m' },
    })
  })
  afterAll(() => limited.close())

  it('PW-01 with no client registered for password, grant_type=password → 400 unsupported_grant_type', async () => {
    expectError(await post(limited, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD }), { authorization: basic('svc', SVC_SECRET) }),
      400, 'unsupported_grant_type')
  })

  it('CA-09 after N failed authentications of a client_id, even its right secret gets 429 temporarily_unavailable with Retry-After', async () => {
    for (let attempt = 0; attempt < 3; attempt++) {
      expectError(await post(limited, 'grant_type=client_credentials', { authorization: basic('svc-post', `wrong-${attempt}`) }), 401, 'invalid_client')
    }
    const sent = await post(limited, form({ grant_type: 'client_credentials', client_id: 'svc-post', client_secret: POST_SECRET }))
    expectError(sent, 429, 'temporarily_unavailable')
    const retryAfter = Number(sent.headers.get('retry-after'))
    expect(Number.isInteger(retryAfter)).toBe(true)
    expect(retryAfter).toBeGreaterThan(0)
    expect(retryAfter).toBeLessThanOrEqual(60)
    // Throttling is per client_id: another client from the same address is unaffected.
    expect((await post(limited, 'grant_type=client_credentials', { authorization: basic('svc', SVC_SECRET) })).status).toBe(200)
  })

  it('CA-09 a strict client surfaces the 429 JSON error', async () => {
    const client: oauth.Client = { client_id: 'svc-post' }
    const response = await oauth.clientCredentialsGrantRequest(authorizationServer(limited), client, oauth.ClientSecretPost(POST_SECRET),
      new URLSearchParams(), insecure)
    const failure = await oauth.processClientCredentialsResponse(authorizationServer(limited), client, response).catch((error: unknown) => error)
    expect(failure).toBeInstanceOf(oauth.ResponseBodyError)
    expect((failure as oauth.ResponseBodyError).status).toBe(429)
    expect((failure as oauth.ResponseBodyError).error).toBe('temporarily_unavailable')
  })
})

describe('brute force per source address and per username (CA-09, PW-04)', () => {
  it('CA-09 after N failed authentications from one address, every client from it gets 429', async ({ onTestFinished }) => {
    const perIp = await startAuthServerGateway({
      clients: await clients(), users: await users(), throttling: { failures_per_client: 1000, failures_per_ip: 3 },
    })
    onTestFinished(() => perIp.close())
    await post(perIp, 'grant_type=client_credentials', { authorization: basic('nobody', 'x') })
    await post(perIp, 'grant_type=client_credentials', { authorization: basic('svc', 'x') })
    await post(perIp, form({ grant_type: 'client_credentials', client_id: 'svc-post', client_secret: 'x' }))
    const sent = await post(perIp, 'grant_type=client_credentials', { authorization: basic('an:identifier', ODD_SECRET) })
    expectError(sent, 429, 'temporarily_unavailable')
    expect(Number(sent.headers.get('retry-after'))).toBeGreaterThan(0)
  })

  it('PW-04 after N wrong passwords for a username, even the right password gets 429', async ({ onTestFinished }) => {
    const perUser = await startAuthServerGateway({
      clients: await clients(), users: await users(), throttling: { failures_per_client: 2, failures_per_ip: 1000 },
    })
    onTestFinished(() => perUser.close())
    const fp = { authorization: basic('fp', FP_SECRET) }
    for (let attempt = 0; attempt < 2; attempt++) {
      expectError(await post(perUser, form({ grant_type: 'password', username: 'alice', password: `guess-${attempt}` }), fp), 400, 'invalid_grant')
    }
    const sent = await post(perUser, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD }), fp)
    expectError(sent, 429, 'temporarily_unavailable')
    expect(Number(sent.headers.get('retry-after'))).toBeGreaterThan(0)
    // Another user through the same client is not affected.
    expect((await post(perUser, form({ grant_type: 'password', username: 'bob', password: BOB_PASSWORD }), fp)).status).toBe(200)
  })

  it('PW-04 wrong passwords from one address for many usernames end in 429 for that address', async ({ onTestFinished }) => {
    const perIp = await startAuthServerGateway({
      clients: await clients(), users: await users(), throttling: { failures_per_client: 1000, failures_per_ip: 3 },
    })
    onTestFinished(() => perIp.close())
    const fp = { authorization: basic('fp', FP_SECRET) }
    for (const username of ['alice', 'bob', 'carol']) {
      expectError(await post(perIp, form({ grant_type: 'password', username, password: 'guess' }), fp), 400, 'invalid_grant')
    }
    expectError(await post(perIp, form({ grant_type: 'password', username: 'alice', password: ALICE_PASSWORD }), fp), 429, 'temporarily_unavailable')
  })
})

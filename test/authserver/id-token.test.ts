/**
 * OpenID Connect ID tokens at /token (checklist §9.2 ID-01..ID-04, RT-07, AC-09, T-04) against the real
 * gateway and embedded server on loopback. Codes come from issueAuthorizationCode on the live server's
 * context (as in test/authserver/authorization-code.test.ts), device approvals from approveDeviceCode (as in
 * test/authserver/device.test.ts); everything else is HTTP. ID tokens are verified with jose against the server's
 * /jwks, their at_hash recomputed here, and oauth4webapi accepts one from a full code exchange.
 */
import { createHash } from 'node:crypto'
import { describe, expect, it, type TestContext } from 'vitest'
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose'
import * as oauth from 'oauth4webapi'
import { issueAuthorizationCode, type IssueAuthorizationCode } from '../../src/authserver/authorization-codes.js'
import { approveDeviceCode } from '../../src/authserver/device.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, TV2, basic, callApi, postForm, refresh, type OAuthResponse } from '../support/authserver.js'
import { testClock, type Clock } from '../support/clock.js'

type Gateway = RunningGateway & { issuer: string }

const { verifier: VERIFIER, challenge: CHALLENGE } = TV2
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'

/** Registered without id_token_signed_response_alg: RS256 (OIDC Registration §2). */
const WEB = { client_id: 'web', client_secret: 'web-secret-0123456789abc' }
/** Registered for ES256 ID tokens, the server's access-token algorithm by default. */
const WEB_ES = { client_id: 'web-es', client_secret: 'web-es-secret-0123456789' }
const APP = { client_id: 'first-party-app', client_secret: 'app-secret-0123456789' }
const TV = { client_id: 'tv' }
/** Holds openid for its browser flows, yet client_credentials never yields an ID token (CC-02, CC-03). */
const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abc' }
const RS = { client_id: 'orders-api', client_secret: 'rs-secret-0123456789abc' }

const SCOPES = ['openid', 'profile', 'email', 'orders:read']
/** The ID token's claims, exactly: nothing of the user beyond sub (profile claims are /userinfo's). */
const CLAIMS = ['at_hash', 'aud', 'auth_time', 'azp', 'exp', 'iat', 'iss', 'sub']

function setup(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const code = { grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: SCOPES }
  return {
    access_token: { audience: [RS.client_id] },
    clients: [
      { ...WEB, ...code },
      { ...WEB_ES, ...code, id_token_signed_response_alg: 'ES256' },
      { ...APP, token_endpoint_auth_method: 'client_secret_post', grant_types: ['password', 'refresh_token'], first_party: true, scopes: SCOPES },
      { ...TV, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT, 'refresh_token'], scopes: SCOPES },
      { ...SVC, grant_types: ['client_credentials'], scopes: ['openid', 'orders:read'] },
      { ...RS, grant_types: ['client_credentials'], scopes: ['orders:read'] },
    ],
    users: [{ ...ALICE, claims: { name: 'Alice', email: 'alice@example.com', email_verified: true } }],
    ...extra,
  }
}

async function start(context: TestContext, extra: Record<string, unknown> = {}, clock?: Clock): Promise<Gateway> {
  const gateway = await startAuthServerGateway(setup(extra), {}, clock ? { now: clock.now } : {})
  context.onTestFinished(() => gateway.close())
  return gateway
}

const ctxOf = (gateway: Gateway) => gateway.app.authServer!.ctx

/** What /authorize will do once alice has approved: a code for `client` with the TV-2 challenge and R1 sent. */
function issueCode(gateway: Gateway, clientId: string, overrides: Partial<IssueAuthorizationCode> = {}): Promise<string> {
  const ctx = ctxOf(gateway)
  return issueAuthorizationCode(ctx, {
    client: ctx.clients.find(clientId)!,
    redirectUri: R1,
    redirectUriWasSent: true,
    scope: ['openid', 'orders:read'],
    sub: 'alice',
    authTime: Math.floor(ctx.now() / 1000),
    codeChallenge: CHALLENGE,
    codeChallengeMethod: 'S256',
    ...overrides,
  })
}

async function redeem(gateway: Gateway, client: { client_id: string; client_secret: string }, code: string): Promise<OAuthResponse> {
  const res = await postForm(gateway, '/token', { grant_type: 'authorization_code', code, redirect_uri: R1, code_verifier: VERIFIER },
    { authorization: basic(client.client_id, client.client_secret) })
  expect(res.status, res.text).toBe(200)
  return res
}

/** Verifies an ID token against the server's published /jwks, as a relying party would; returns header and claims. */
async function verifyIdToken(gateway: Gateway, idToken: unknown, clientId: string, clock?: Clock) {
  expect(typeof idToken).toBe('string')
  const jwks = await (await fetch(`${gateway.issuer}/jwks`)).json() as JSONWebKeySet
  const { payload, protectedHeader } = await jwtVerify(idToken as string, createLocalJWKSet(jwks), {
    issuer: gateway.issuer, audience: clientId, typ: 'JWT', requiredClaims: ['sub', 'exp', 'iat'],
    ...(clock && { currentDate: new Date(clock.now()) }),
  })
  return { payload, header: protectedHeader, jwks }
}

/** OIDC Core §3.1.3.6, computed here independently of src/: left half of SHA-256 (SHA-512 for Ed25519), base64url. */
function atHash(accessToken: string, hash: 'sha256' | 'sha512' = 'sha256'): string {
  const digest = createHash(hash).update(Buffer.from(accessToken, 'ascii')).digest()
  return digest.subarray(0, digest.length / 2).toString('base64url')
}

function pollDevice(gateway: Gateway, deviceCode: string): Promise<OAuthResponse> {
  return postForm(gateway, '/token', { grant_type: DEVICE_GRANT, device_code: deviceCode, ...TV })
}

async function approvedDeviceCode(gateway: Gateway, scope: string, authTime: number): Promise<string> {
  const res = await postForm(gateway, '/device_authorization', { ...TV, scope })
  expect(res.status).toBe(200)
  expect(await approveDeviceCode(ctxOf(gateway), res.body.user_code as string, { sub: 'alice', authTime })).toBe(true)
  return res.body.device_code as string
}

describe('ID tokens at /token', () => {
  it('ID-01 AC-09 T-04 no openid granted, no id_token: code, refresh, password and device grants', async (context) => {
    const gateway = await start(context)
    const code = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id, { scope: ['profile', 'orders:read'] }))
    expect(code.body).toMatchObject({ scope: 'profile orders:read', refresh_token: expect.any(String) })
    expect(code.body).not.toHaveProperty('id_token')
    const refreshed = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: code.body.refresh_token as string },
      { authorization: basic(WEB.client_id, WEB.client_secret) })
    expect(refreshed.status).toBe(200)
    expect(refreshed.body).not.toHaveProperty('id_token')
    const password = await postForm(gateway, '/token', { grant_type: 'password', ...ALICE, ...APP, scope: 'orders:read' })
    expect(password.status).toBe(200)
    expect(password.body).not.toHaveProperty('id_token')
    const device = await pollDevice(gateway, await approvedDeviceCode(gateway, 'orders:read', Math.floor(Date.now() / 1000)))
    expect(device.status).toBe(200)
    expect(device.body).not.toHaveProperty('id_token')
  })

  it('ID-01 CC-03 client_credentials never returns an id_token, even for a client registered for openid', async (context) => {
    const gateway = await start(context)
    const auth = { authorization: basic(SVC.client_id, SVC.client_secret) }
    const omitted = await postForm(gateway, '/token', { grant_type: 'client_credentials' }, auth)
    expect(omitted.status).toBe(200)
    expect(omitted.body.scope).toBe('orders:read')
    expect(omitted.body).not.toHaveProperty('id_token')
    const asked = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'openid orders:read' }, auth)
    expect([asked.status, asked.body.error]).toEqual([400, 'invalid_scope'])
    expect(asked.body).not.toHaveProperty('id_token')
  })

  it('ID-02 a JWS with typ JWT and a kid published in /jwks, RS256 by default whatever the access-token alg', async (context) => {
    const gateway = await start(context)
    const res = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id))
    const { header, jwks } = await verifyIdToken(gateway, res.body.id_token, WEB.client_id)
    expect(header).toStrictEqual({ alg: 'RS256', kid: expect.any(String), typ: 'JWT' })
    expect(jwks.keys.find((key) => key.kid === header.kid)).toMatchObject({ kty: 'RSA', alg: 'RS256', use: 'sig' })
    // The access token is signed with the server's algorithm (ES256 by default), and is at+jwt.
    expect(decodeProtectedHeader(res.body.access_token as string)).toMatchObject({ alg: 'ES256', typ: 'at+jwt' })
  })

  it('ID-02 a client registered with id_token_signed_response_alg ES256 gets ES256, an alg the metadata lists', async (context) => {
    const gateway = await start(context)
    const res = await redeem(gateway, WEB_ES, await issueCode(gateway, WEB_ES.client_id))
    const { header, jwks } = await verifyIdToken(gateway, res.body.id_token, WEB_ES.client_id)
    expect(header).toMatchObject({ alg: 'ES256', typ: 'JWT' })
    expect(jwks.keys.find((key) => key.kid === header.kid)).toMatchObject({ kty: 'EC', alg: 'ES256' })
    const metadata = await (await fetch(`${gateway.issuer}/.well-known/openid-configuration`)).json() as Record<string, unknown>
    expect(metadata.id_token_signing_alg_values_supported).toEqual(expect.arrayContaining(['ES256', 'RS256']))
  })

  it('ID-02 ID-03 with EdDSA configured and registered, the ID token is EdDSA and at_hash is the left half of SHA-512', async (context) => {
    const gateway = await start(context, {
      signing: { algorithm: 'EdDSA' },
      clients: [{ ...WEB, grant_types: ['authorization_code'], redirect_uris: [R1], scopes: SCOPES, id_token_signed_response_alg: 'EdDSA' }],
    })
    const res = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id))
    const { header, payload } = await verifyIdToken(gateway, res.body.id_token, WEB.client_id)
    expect(header).toMatchObject({ alg: 'EdDSA', typ: 'JWT' })
    expect(payload.at_hash).toBe(atHash(res.body.access_token as string, 'sha512'))
    expect(payload.at_hash).toHaveLength(43)
  })

  it('ID-03 claims: iss, sub, aud and azp = client_id, iat, exp one access-token TTL later, auth_time, at_hash; nothing else', async (context) => {
    const gateway = await start(context)
    const authTime = Math.floor(Date.now() / 1000) - 300
    const res = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id, { scope: ['openid', 'profile', 'email'], authTime }))
    expect(res.body.scope).toBe('openid profile email')
    const { payload } = await verifyIdToken(gateway, res.body.id_token, WEB.client_id)
    expect(Object.keys(payload).sort()).toEqual(CLAIMS)
    expect(payload).toMatchObject({ iss: gateway.issuer, sub: 'alice', aud: WEB.client_id, azp: WEB.client_id, auth_time: authTime })
    expect(Math.abs(payload.iat! - Date.now() / 1000)).toBeLessThan(5)
    expect(payload.exp! - payload.iat!).toBe(3600)
    expect(payload.at_hash).toBe(atHash(res.body.access_token as string))
    // Not this client's, nor the access token's: another token's at_hash differs.
    expect(payload.at_hash).not.toBe(atHash(`${res.body.access_token as string}x`))
  })

  it('ID-03 nonce is echoed exactly and absent when not sent', async (context) => {
    const gateway = await start(context)
    const nonce = 'n-0S6_WzA2Mj +/=%20☃'
    const withNonce = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id, { nonce }))
    expect((await verifyIdToken(gateway, withNonce.body.id_token, WEB.client_id)).payload.nonce).toBe(nonce)
    const without = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id))
    const { payload } = await verifyIdToken(gateway, without.body.id_token, WEB.client_id)
    expect(payload).not.toHaveProperty('nonce')
  })

  it('AT-06 ID-02 an ID token presented to the gateway as an access token is 401 invalid_token', async (context) => {
    const gateway = await start(context)
    const res = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id))
    expect((await callApi(gateway, res.body.access_token as string)).status).toBe(200)
    const api = await callApi(gateway, res.body.id_token as string)
    expect(api.status).toBe(401)
    expect(api.headers.get('www-authenticate')).toContain('error="invalid_token"')
  })

  it('ID-02 metadata lists claims_supported: the ID token\'s claims and the standard claims of each scope', async (context) => {
    const gateway = await start(context)
    const metadata = await (await fetch(`${gateway.issuer}/.well-known/openid-configuration`)).json() as Record<string, unknown>
    const claims = metadata.claims_supported as string[]
    expect(claims).toEqual(expect.arrayContaining([...CLAIMS, 'nonce', 'name', 'email', 'email_verified', 'address', 'phone_number', 'updated_at']))
    expect(new Set(claims).size).toBe(claims.length)
  })
})

describe('ID tokens on refresh (RT-07)', () => {
  it('RT-07 with openid still in scope: the same iss, sub, aud, azp and auth_time, a new iat, no nonce, at_hash of the new access token', async (context) => {
    const clock = testClock()
    const gateway = await start(context, {}, clock)
    const authTime = clock.seconds() - 120
    const first = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id, { nonce: 'abc-123', authTime }))
    const original = (await verifyIdToken(gateway, first.body.id_token, WEB.client_id, clock)).payload
    expect(original).toMatchObject({ nonce: 'abc-123', auth_time: authTime })

    clock.advance(10_000)
    const res = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: first.body.refresh_token as string },
      { authorization: basic(WEB.client_id, WEB.client_secret) })
    expect(res.status).toBe(200)
    expect(res.body.scope).toBe('openid orders:read')
    const { payload } = await verifyIdToken(gateway, res.body.id_token, WEB.client_id, clock)
    const same = (claims: JWTPayload) => ({ iss: claims.iss, sub: claims.sub, aud: claims.aud, azp: claims.azp, auth_time: claims.auth_time })
    expect(same(payload)).toStrictEqual(same(original))
    expect(payload.iat).toBe(original.iat! + 10)
    expect(payload).not.toHaveProperty('nonce')
    expect(payload.at_hash).toBe(atHash(res.body.access_token as string))
    expect(payload.at_hash).not.toBe(original.at_hash)
  })

  it('RT-07 RT-06 a refresh narrowed to exclude openid returns no id_token; a later one with the whole scope does again', async (context) => {
    const gateway = await start(context)
    const first = await redeem(gateway, WEB, await issueCode(gateway, WEB.client_id))
    const auth = { authorization: basic(WEB.client_id, WEB.client_secret) }
    const narrowed = await postForm(gateway, '/token',
      { grant_type: 'refresh_token', refresh_token: first.body.refresh_token as string, scope: 'orders:read' }, auth)
    expect(narrowed.status).toBe(200)
    expect(narrowed.body.scope).toBe('orders:read')
    expect(narrowed.body).not.toHaveProperty('id_token')
    const whole = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: narrowed.body.refresh_token as string }, auth)
    expect(whole.body.scope).toBe('openid orders:read')
    expect((await verifyIdToken(gateway, whole.body.id_token, WEB.client_id)).payload.sub).toBe('alice')
  })
})

describe('ID tokens of the device and password grants', () => {
  it('ID-01 ID-03 the device grant with openid approved: an id_token with the approval\'s auth_time and no nonce, and again on refresh', async (context) => {
    const gateway = await start(context)
    const authTime = Math.floor(Date.now() / 1000) - 60
    const res = await pollDevice(gateway, await approvedDeviceCode(gateway, 'openid orders:read', authTime))
    expect(res.status, res.text).toBe(200)
    const { payload, header } = await verifyIdToken(gateway, res.body.id_token, TV.client_id)
    expect(header.alg).toBe('RS256')
    expect(Object.keys(payload).sort()).toEqual(CLAIMS)
    expect(payload).toMatchObject({ sub: 'alice', aud: TV.client_id, azp: TV.client_id, auth_time: authTime,
      at_hash: atHash(res.body.access_token as string) })
    const refreshed = await refresh(gateway, res.body.refresh_token as string, { client_id: TV.client_id, client_secret: '' })
    expect(refreshed.status, refreshed.text).toBe(200)
    expect((await verifyIdToken(gateway, refreshed.body.id_token, TV.client_id)).payload).toMatchObject({ sub: 'alice', auth_time: authTime })
  })

  it('ID-01 ID-03 the password grant with openid: an id_token whose auth_time is the login, no nonce', async (context) => {
    const clock = testClock()
    const gateway = await start(context, {}, clock)
    const res = await postForm(gateway, '/token', { grant_type: 'password', ...ALICE, ...APP, scope: 'openid profile' })
    expect(res.status).toBe(200)
    const { payload } = await verifyIdToken(gateway, res.body.id_token, APP.client_id, clock)
    expect(Object.keys(payload).sort()).toEqual(CLAIMS)
    expect(payload).toMatchObject({ iss: gateway.issuer, sub: 'alice', aud: APP.client_id, auth_time: clock.seconds(), iat: clock.seconds(),
      at_hash: atHash(res.body.access_token as string) })
    expect(decodeJwt(res.body.id_token as string)).not.toHaveProperty('name')
  })
})

describe('a strict client (oauth4webapi) accepts our ID tokens', () => {
  const insecure = { [oauth.allowInsecureRequests]: true } as const

  it('ID-01 ID-02 ID-03 RT-07 code exchange with openid and a nonce, an unregistered client expecting RS256, then a refresh', async (context) => {
    const gateway = await start(context)
    const issuer = new URL(gateway.issuer)
    const discovered = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure }))
    expect(discovered.id_token_signing_alg_values_supported).toContain('RS256')
    // Without the metadata member and without a registered alg, o4w accepts RS256 ID tokens only.
    const { id_token_signing_alg_values_supported: _listed, ...as } = discovered
    const client: oauth.Client = { client_id: WEB.client_id }
    const auth = oauth.ClientSecretBasic(WEB.client_secret)
    const verifier = oauth.generateRandomCodeVerifier()
    const nonce = oauth.generateRandomNonce()
    const state = oauth.generateRandomState()
    const code = await issueCode(gateway, WEB.client_id, { codeChallenge: await oauth.calculatePKCECodeChallenge(verifier), nonce })
    // Stands in for /authorize's redirect: code, state and iss (RFC 9207, A-10).
    const params = oauth.validateAuthResponse(as, client, new URLSearchParams({ code, state, iss: gateway.issuer }), state)
    const response = await oauth.authorizationCodeGrantRequest(as, client, auth, params, R1, verifier, insecure)
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, response, { expectedNonce: nonce, requireIdToken: true })
    // The library checked iss, aud, exp, iat, the alg and the nonce; the signature is checked against /jwks here.
    await oauth.validateApplicationLevelSignature(as, response, insecure)
    const claims = oauth.getValidatedIdTokenClaims(tokens)!
    expect(claims).toMatchObject({ iss: gateway.issuer, sub: 'alice', aud: WEB.client_id, nonce })
    expect(claims.at_hash).toBe(atHash(tokens.access_token))

    const refreshResponse = await oauth.refreshTokenGrantRequest(as, client, auth, tokens.refresh_token!, insecure)
    const refreshed = await oauth.processRefreshTokenResponse(as, client, refreshResponse)
    await oauth.validateApplicationLevelSignature(as, refreshResponse, insecure)
    const again = oauth.getValidatedIdTokenClaims(refreshed)!
    expect(again).toMatchObject({ sub: 'alice', aud: WEB.client_id, auth_time: claims.auth_time })
    expect(again).not.toHaveProperty('nonce')
  })

  it('ID-03 the library refuses our ID token for a different nonce, and accepts one without nonce when none was sent', async (context) => {
    const gateway = await start(context)
    const issuer = new URL(gateway.issuer)
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure }))
    const client: oauth.Client = { client_id: WEB.client_id }
    const auth = oauth.ClientSecretBasic(WEB.client_secret)
    const exchange = async (overrides: Partial<IssueAuthorizationCode>) => {
      const code = await issueCode(gateway, WEB.client_id, overrides)
      const params = oauth.validateAuthResponse(as, client, new URLSearchParams({ code, iss: gateway.issuer }), oauth.skipStateCheck)
      return oauth.authorizationCodeGrantRequest(as, client, auth, params, R1, VERIFIER, insecure)
    }
    await expect(oauth.processAuthorizationCodeResponse(as, client, await exchange({ nonce: 'sent' }), { expectedNonce: 'other' }))
      .rejects.toThrow(/nonce/)
    const none = await oauth.processAuthorizationCodeResponse(as, client, await exchange({}), { requireIdToken: true })
    expect(oauth.getValidatedIdTokenClaims(none)).not.toHaveProperty('nonce')
  })
})

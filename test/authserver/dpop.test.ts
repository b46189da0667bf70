/**
 * DPoP (RFC 9449) at the embedded server's token endpoint (issue 20), driven by oauth4webapi's DPoP support
 * against the real gateway on loopback: every grant binds its access token to the proof's key (`cnf.jkt` in
 * a JWT, the store record of an opaque one, `token_type: DPoP`), a public client's refresh tokens are bound
 * too (§5), `dpop_jkt` binds a code (§10), nonces round-trip (§8), each proof is single use (§11.1), and
 * every malformed proof is 400 invalid_dpop_proof with nothing issued. Raw proofs for the abuse cases are
 * signed with jose.
 */
import { randomUUID } from 'node:crypto'
import { calculateJwkThumbprint, decodeJwt, exportJWK, SignJWT, type JWK } from 'jose'
import * as oauth from 'oauth4webapi'
import { describe, expect, it, type TestContext } from 'vitest'
import { tokenHash } from '../../src/authn/token-cache.js'
import { approveDeviceCode, createDeviceCode } from '../../src/authserver/device.js'
import { authorizationServerWarnings } from '../../src/authserver/lint.js'
import type { GatewayConfig } from '../../src/config/schema.js'
import { ALICE, R1, basic, postForm, type OAuthResponse } from '../support/authserver.js'
import { FormBrowser, loginAndConsent } from '../support/browser.js'
import { testClock, type Clock } from '../support/clock.js'
import { rawRequest, startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { register } from '../support/registration.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
type KeyPair = oauth.CryptoKeyPair
type Gateway = RunningGateway & { issuer: string }

const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }
const BOUND = { client_id: 'bound-svc', client_secret: 'bound-secret-0123456789abc' }
const WEB = { client_id: 'web', client_secret: 'web-secret-0123456789abcdef' }
const FIRST = { client_id: 'first-party', client_secret: 'first-secret-0123456789abc' }
const RS = { client_id: 'orders-api', client_secret: 'rs-secret-0123456789abcdefg' }

/** Confidential client_credentials clients (one that must use DPoP), a confidential and a public code client, a TV, alice. */
function setup(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    access_token: { audience: [RS.client_id] },
    clients: [
      { ...SVC, grant_types: ['client_credentials'], scopes: ['orders:read'] },
      { ...BOUND, grant_types: ['client_credentials'], scopes: ['orders:read'], dpop_bound_access_tokens: true },
      { ...WEB, grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: ['orders:read'] },
      { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: ['orders:read'] },
      { client_id: 'tv', token_endpoint_auth_method: 'none', grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'], scopes: ['orders:read'] },
      { ...FIRST, first_party: true, grant_types: ['password', 'refresh_token'], scopes: ['orders:read'] },
      { ...RS, grant_types: ['client_credentials'], scopes: [] },
    ],
    users: [{ ...ALICE, claims: { name: 'Alice' } }],
    ...extra,
  }
}

interface Setup {
  gateway: Gateway
  as: oauth.AuthorizationServer
  tokenEndpoint: string
}

async function start(context: TestContext, authorizationServer: Record<string, unknown> = {}, top: Record<string, unknown> = {},
  clock?: Clock): Promise<Setup> {
  const gateway = await startAuthServerGateway(setup(authorizationServer), top, clock ? { now: clock.now } : {})
  context.onTestFinished(() => gateway.close())
  const issuer = new URL(gateway.issuer)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  return { gateway, as, tokenEndpoint: as.token_endpoint! }
}

const keyPair = (): Promise<KeyPair> => oauth.generateKeyPair('ES256')
const thumbprint = async (key: KeyPair) => calculateJwkThumbprint(await exportJWK(key.publicKey))
const dpopOf = (client: oauth.Client, key: KeyPair) => oauth.DPoP(client, key)

async function clientCredentials(t: Setup, caller: { client_id: string; client_secret: string }, DPoP?: oauth.DPoPHandle): Promise<Response> {
  return oauth.clientCredentialsGrantRequest(t.as, { client_id: caller.client_id }, oauth.ClientSecretBasic(caller.client_secret),
    new URLSearchParams({ scope: 'orders:read' }), { ...insecure, ...(DPoP && { DPoP }) })
}

/** A proof signed with jose, every claim and header member overridable (the abuse cases). */
async function rawProof(t: Setup, key: KeyPair, claims: Record<string, unknown> = {}, header: Record<string, unknown> = {},
  nowSeconds = Math.floor(Date.now() / 1000)): Promise<string> {
  return new SignJWT({ jti: randomUUID(), htm: 'POST', htu: t.tokenEndpoint, iat: nowSeconds, ...claims })
    .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: await exportJWK(key.publicKey), ...header })
    .sign(key.privateKey)
}

/** client_credentials for svc with `proof` (or none) as the DPoP header, sent as is. */
function rawClientCredentials(t: Setup, proof?: string, caller = SVC): Promise<OAuthResponse> {
  return postForm(t.gateway, '/token', { grant_type: 'client_credentials' },
    { authorization: basic(caller.client_id, caller.client_secret), ...(proof !== undefined && { dpop: proof }) })
}

/** The access tokens the store holds: none is what "nothing issued" means. */
async function storedAccessTokens(t: Setup): Promise<number> {
  return (await t.gateway.app.authServer!.ctx.store.list('access_token')).length
}

async function introspect(t: Setup, token: string): Promise<Record<string, unknown>> {
  return (await postForm(t.gateway, '/introspect', { token }, { authorization: basic(RS.client_id, RS.client_secret) })).body
}

/** What a refused request raised in oauth4webapi: [status, error]. */
async function refusal(promise: Promise<unknown>): Promise<[number, string]> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason)
  expect(error).toBeInstanceOf(oauth.ResponseBodyError)
  return [(error as oauth.ResponseBodyError).status, (error as oauth.ResponseBodyError).error]
}

const errorsCounted = async (t: Setup, error: string) =>
  (await t.gateway.app.metrics.tokenErrors.get()).values.find((sample) => sample.labels.error === error)?.value ?? 0

interface Flow { callback: URL; state: string; verifier: string }

/** alice through /authorize (PKCE S256, state, and `extra` parameters), login and consent. */
async function authorize(t: Setup, clientId: string, extra: Record<string, string> = {}): Promise<Flow> {
  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const url = new URL(t.as.authorization_endpoint!)
  url.search = new URLSearchParams({
    response_type: 'code', client_id: clientId, redirect_uri: R1, scope: 'orders:read', state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', ...extra,
  }).toString()
  const browser = new FormBrowser(t.gateway.url)
  const answer = await loginAndConsent(browser, await browser.get(url.href), ALICE)
  expect(answer.location?.startsWith(`${R1}?`)).toBe(true)
  return { callback: new URL(answer.location!), state, verifier }
}

const SPA: oauth.Client = { client_id: 'spa' }
const WEB_CLIENT: oauth.Client = { client_id: WEB.client_id }
/** web authenticates with its secret; spa and tv are public. */
const authOf = (client: oauth.Client) => (client.client_id === WEB.client_id ? oauth.ClientSecretBasic(WEB.client_secret) : oauth.None())

async function exchange(t: Setup, client: oauth.Client, flow: Flow, DPoP?: oauth.DPoPHandle): Promise<oauth.TokenEndpointResponse> {
  const params = oauth.validateAuthResponse(t.as, client, flow.callback, flow.state)
  return oauth.processAuthorizationCodeResponse(t.as, client, await oauth.authorizationCodeGrantRequest(
    t.as, client, authOf(client), params, R1, flow.verifier, { ...insecure, ...(DPoP && { DPoP }) }))
}

async function refresh(t: Setup, client: oauth.Client, refreshToken: string, DPoP?: oauth.DPoPHandle): Promise<oauth.TokenEndpointResponse> {
  return oauth.processRefreshTokenResponse(t.as, client,
    await oauth.refreshTokenGrantRequest(t.as, client, authOf(client), refreshToken, { ...insecure, ...(DPoP && { DPoP }) }))
}

describe('DPoP at the token endpoint: binding', () => {
  it('metadata lists dpop_signing_alg_values_supported: the default algorithms, or dpop.algorithms', async (context) => {
    const t = await start(context)
    expect(t.as.dpop_signing_alg_values_supported).toEqual(['ES256', 'ES384', 'PS256', 'RS256', 'EdDSA', 'Ed25519'])
    const oidc = await (await fetch(`${t.gateway.issuer}/.well-known/openid-configuration`)).json() as Record<string, unknown>
    expect(oidc.dpop_signing_alg_values_supported).toEqual(t.as.dpop_signing_alg_values_supported)
    const configured = await start(context, {}, { dpop: { algorithms: ['ES256', 'EdDSA'] } })
    expect(configured.as.dpop_signing_alg_values_supported).toEqual(['ES256', 'EdDSA'])
  })

  it('client_credentials with a proof: token_type DPoP and a JWT whose cnf.jkt is the key\'s thumbprint', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const response = await clientCredentials(t, SVC, dpopOf({ client_id: SVC.client_id }, key))
    const raw = await response.clone().json() as Record<string, unknown>
    expect(raw.token_type).toBe('DPoP')
    const tokens = await oauth.processClientCredentialsResponse(t.as, { client_id: SVC.client_id }, response)
    const claims = decodeJwt(tokens.access_token)
    // The thumbprint as the client computes it (oauth4webapi's handle) and as jose does (RFC 7638).
    expect(claims.cnf).toEqual({ jkt: await dpopOf({ client_id: SVC.client_id }, key).calculateThumbprint() })
    expect(claims.cnf).toEqual({ jkt: await thumbprint(key) })
    // The store's record says it too, so introspection does.
    expect(await introspect(t, tokens.access_token)).toMatchObject({ active: true, token_type: 'DPoP', cnf: { jkt: await thumbprint(key) } })
  })

  it('without a proof nothing changes: token_type Bearer, no cnf', async (context) => {
    const t = await start(context)
    const raw = await rawClientCredentials(t)
    expect(raw.status).toBe(200)
    expect(raw.body.token_type).toBe('Bearer')
    expect(decodeJwt(raw.body.access_token as string).cnf).toBeUndefined()
    const answer = await introspect(t, raw.body.access_token as string)
    expect(answer).toMatchObject({ active: true, token_type: 'Bearer' })
    expect(answer.cnf).toBeUndefined()
  })

  it('an opaque token is bound in its store record: introspection shows cnf.jkt and token_type DPoP, the principal carries jkt', async (context) => {
    const t = await start(context, { access_token: { audience: [RS.client_id], format: 'opaque' } })
    const key = await keyPair()
    const tokens = await oauth.processClientCredentialsResponse(t.as, { client_id: SVC.client_id },
      await clientCredentials(t, SVC, dpopOf({ client_id: SVC.client_id }, key)))
    expect(tokens.access_token).toMatch(/^pat_/)
    expect(tokens.token_type).toBe('dpop')
    const jkt = await thumbprint(key)
    expect(await introspect(t, tokens.access_token)).toMatchObject({ active: true, token_type: 'DPoP', cnf: { jkt } })
    const principal = await t.gateway.app.authServer!.embedded.lookupOpaque(tokenHash(tokens.access_token))
    expect(principal?.jkt).toBe(jkt)
    // A Bearer one has none.
    const bearer = await rawClientCredentials(t)
    expect((await t.gateway.app.authServer!.embedded.lookupOpaque(tokenHash(bearer.body.access_token as string)))?.jkt).toBeUndefined()
  })

  it('a client with dpop_bound_access_tokens gets 400 invalid_request without a proof, and a bound token with one', async (context) => {
    const t = await start(context)
    const refused = await rawClientCredentials(t, undefined, BOUND)
    expect([refused.status, refused.body.error]).toEqual([400, 'invalid_request'])
    expect(refused.body.error_description).toContain('DPoP proof is required')
    expect(await storedAccessTokens(t)).toBe(0)
    const key = await keyPair()
    const tokens = await oauth.processClientCredentialsResponse(t.as, { client_id: BOUND.client_id },
      await clientCredentials(t, BOUND, dpopOf({ client_id: BOUND.client_id }, key)))
    expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt: await thumbprint(key) })
  })

  it('the password and device_code grants bind their access tokens too', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const jkt = await thumbprint(key)
    const first: oauth.Client = { client_id: FIRST.client_id }
    const password = await oauth.processGenericTokenEndpointResponse(t.as, first, await oauth.genericTokenEndpointRequest(t.as, first,
      oauth.ClientSecretBasic(FIRST.client_secret), 'password', new URLSearchParams({ ...ALICE, scope: 'orders:read' }),
      { ...insecure, DPoP: dpopOf(first, key) }))
    expect([password.token_type, decodeJwt(password.access_token).cnf]).toEqual(['dpop', { jkt }])

    const ctx = t.gateway.app.authServer!.ctx
    const device = await createDeviceCode(ctx, 'tv', ['orders:read'])
    expect(await approveDeviceCode(ctx, device.userCode, { sub: ALICE.username, authTime: Math.floor(Date.now() / 1000) })).toBe(true)
    const tv: oauth.Client = { client_id: 'tv' }
    const DPoP = dpopOf(tv, key)
    const polled = await oauth.processDeviceCodeResponse(t.as, tv,
      await oauth.deviceCodeGrantRequest(t.as, tv, oauth.None(), device.deviceCode, { ...insecure, DPoP }))
    expect([polled.token_type, decodeJwt(polled.access_token).cnf]).toEqual(['dpop', { jkt }])
    // A public client's refresh token is bound to that key (§5).
    const unbound = await postForm(t.gateway, '/token', { grant_type: 'refresh_token', refresh_token: polled.refresh_token!, client_id: 'tv' })
    expect([unbound.status, unbound.body.error]).toEqual([400, 'invalid_grant'])
    const refreshed = await refresh(t, tv, polled.refresh_token!, DPoP)
    expect([refreshed.token_type, decodeJwt(refreshed.access_token).cnf]).toEqual(['dpop', { jkt }])
  })
})

describe('DPoP at the token endpoint: authorization code and refresh', () => {
  it('a public client: code + PKCE + DPoP, then refreshes with the same key, every token bound to it', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const jkt = await thumbprint(key)
    const DPoP = dpopOf(SPA, key)
    const tokens = await exchange(t, SPA, await authorize(t, 'spa'), DPoP)
    expect(tokens.token_type).toBe('dpop')
    expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt })
    const refreshed = await refresh(t, SPA, tokens.refresh_token!, DPoP)
    expect(refreshed.token_type).toBe('dpop')
    expect(decodeJwt(refreshed.access_token).cnf).toEqual({ jkt })
    expect(refreshed.refresh_token).not.toBe(tokens.refresh_token)
    // The rotated family stays bound.
    expect((await refresh(t, SPA, refreshed.refresh_token!, DPoP)).token_type).toBe('dpop')
  })

  it('a public client\'s refresh with another key or without a proof is invalid_grant, and the family stays usable', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const DPoP = dpopOf(SPA, key)
    const tokens = await exchange(t, SPA, await authorize(t, 'spa'), DPoP)
    const ctx = t.gateway.app.authServer!.ctx
    const before = await ctx.store.list('refresh_token')
    expect(await refusal(refresh(t, SPA, tokens.refresh_token!, dpopOf(SPA, await keyPair())))).toEqual([400, 'invalid_grant'])
    expect(await refusal(refresh(t, SPA, tokens.refresh_token!))).toEqual([400, 'invalid_grant'])
    // Nothing rotated, nothing revoked: the same records, none consumed.
    const after = await ctx.store.list('refresh_token')
    expect(after).toEqual(before)
    expect(after.every((record) => record.value.consumedAt === undefined)).toBe(true)
    const refreshed = await refresh(t, SPA, tokens.refresh_token!, DPoP)
    expect(decodeJwt(refreshed.access_token).cnf).toEqual({ jkt: await thumbprint(key) })
  })

  it('a confidential client\'s refresh token is not bound; each access token is bound to its own request\'s key', async (context) => {
    const t = await start(context)
    const first = await keyPair()
    const tokens = await exchange(t, WEB_CLIENT, await authorize(t, WEB.client_id), dpopOf(WEB_CLIENT, first))
    expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt: await thumbprint(first) })
    const bearer = await refresh(t, WEB_CLIENT, tokens.refresh_token!)
    expect(bearer.token_type).toBe('bearer')
    expect(decodeJwt(bearer.access_token).cnf).toBeUndefined()
    const second = await keyPair()
    const rebound = await refresh(t, WEB_CLIENT, bearer.refresh_token!, dpopOf(WEB_CLIENT, second))
    expect(decodeJwt(rebound.access_token).cnf).toEqual({ jkt: await thumbprint(second) })
  })

  it('dpop_jkt binds the code: another key or no proof is invalid_dpop_proof and the code stays redeemable by its key', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const jkt = await thumbprint(key)
    const flow = await authorize(t, 'spa', { dpop_jkt: jkt })
    expect(await refusal(exchange(t, SPA, flow, dpopOf(SPA, await keyPair())))).toEqual([400, 'invalid_dpop_proof'])
    expect(await refusal(exchange(t, SPA, flow))).toEqual([400, 'invalid_dpop_proof'])
    expect(await storedAccessTokens(t)).toBe(0)
    const tokens = await exchange(t, SPA, flow, dpopOf(SPA, key))
    expect(decodeJwt(tokens.access_token).cnf).toEqual({ jkt })
  })

  it('a malformed dpop_jkt goes back to the client as invalid_request, with state and no code', async (context) => {
    const t = await start(context)
    const url = new URL(t.as.authorization_endpoint!)
    url.search = new URLSearchParams({
      response_type: 'code', client_id: 'spa', redirect_uri: R1, state: 'xyz', dpop_jkt: 'not-a-thumbprint',
      code_challenge: await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier()), code_challenge_method: 'S256',
    }).toString()
    const res = await new FormBrowser(t.gateway.url).get(url.href)
    expect(res.status).toBe(302)
    const callback = new URL(res.location!)
    expect(`${callback.origin}${callback.pathname}`).toBe(R1)
    expect(callback.searchParams.get('error')).toBe('invalid_request')
    expect(callback.searchParams.get('error_description')).toContain('dpop_jkt')
    expect(callback.searchParams.get('state')).toBe('xyz')
    expect(callback.searchParams.has('code')).toBe(false)
  })
})

describe('DPoP at the token endpoint: refused proofs', () => {
  it('a proof sent twice is refused the second time (single use), and only one token is issued', async (context) => {
    const t = await start(context)
    const proof = await rawProof(t, await keyPair())
    expect((await rawClientCredentials(t, proof)).status).toBe(200)
    const replayed = await rawClientCredentials(t, proof)
    expect([replayed.status, replayed.body.error]).toEqual([400, 'invalid_dpop_proof'])
    expect(replayed.body.error_description).toBe('the DPoP proof has been used before')
    expect(await storedAccessTokens(t)).toBe(1)
  })

  it('each malformed or misdirected proof is 400 invalid_dpop_proof with nothing issued, counted, and never echoed or logged', async (context) => {
    const t = await start(context)
    // Extractable: the private-jwk case puts its private members in the header.
    const key = await oauth.generateKeyPair('ES256', { extractable: true })
    const now = Math.floor(Date.now() / 1000)
    const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
    const jwk = await exportJWK(key.publicKey)
    const hmac = new Uint8Array(32).fill(7)
    // Each with the check its description names: the proof fails where it is meant to, not earlier.
    const cases: Record<string, [string, string]> = {
      'another htu': [await rawProof(t, key, { htu: `${t.gateway.issuer}/introspect` }), 'for another URL'],
      'another origin': [await rawProof(t, key, { htu: t.tokenEndpoint.replace('127.0.0.1', 'localhost') }), 'for another URL'],
      'another htm': [await rawProof(t, key, { htm: 'GET' }), 'for another HTTP method'],
      'typ JWT': [await rawProof(t, key, {}, { typ: 'JWT' }), 'typ dpop+jwt'],
      'alg none': [`${b64({ alg: 'none', typ: 'dpop+jwt', jwk })}.${b64({ jti: randomUUID(), htm: 'POST', htu: t.tokenEndpoint, iat: now })}.AAAA`,
        'algorithm that is not accepted'],
      'HS256': [await new SignJWT({ jti: randomUUID(), htm: 'POST', htu: t.tokenEndpoint, iat: now })
        .setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt', jwk: { kty: 'oct', k: Buffer.from(hmac).toString('base64url') } as JWK }).sign(hmac),
      'algorithm that is not accepted'],
      'a private jwk': [await rawProof(t, key, {}, { jwk: await exportJWK(key.privateKey) }), 'must be a public key'],
      'iat 10 minutes old': [await rawProof(t, key, { iat: now - 600 }), 'too old or from the future'],
      'iat in the future': [await rawProof(t, key, { iat: now + 600 }), 'too old or from the future'],
      'no jti': [await rawProof(t, key, { jti: undefined }), 'needs a jti'],
      'a signature by another key': [(await rawProof(t, key)).replace(/\.[^.]+$/, `.${(await rawProof(t, await keyPair())).split('.')[2]}`),
        'signature does not verify'],
      'garbage': ['not a proof', 'not a compact JWS'],
      'an empty header': ['', 'not a compact JWS'],
    }
    const logsBefore = t.gateway.logs.length
    for (const [name, [proof, check]] of Object.entries(cases)) {
      const res = await rawClientCredentials(t, proof)
      expect([name, res.status, res.body.error]).toEqual([name, 400, 'invalid_dpop_proof'])
      expect(res.body.error_description).toContain(check)
      if (proof.length > 20) expect(res.text).not.toContain(proof.split('.')[0]!)
      expect(res.text).not.toContain(jwk.x!)
    }
    expect(await storedAccessTokens(t)).toBe(0)
    expect(await errorsCounted(t, 'invalid_dpop_proof')).toBe(Object.keys(cases).length)
    const logged = t.gateway.logs.slice(logsBefore).join('\n')
    expect(logged).toContain('dpop_htu')
    expect(logged).not.toContain(jwk.x!)
    for (const [proof] of Object.values(cases)) if (proof.length > 20) expect(logged).not.toContain(proof.split('.')[1]!)
  })

  it('two DPoP headers are 400 invalid_dpop_proof, nothing issued', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const [one, two] = [await rawProof(t, key), await rawProof(t, key)]
    const body = 'grant_type=client_credentials'
    const res = await rawRequest(t.gateway.port, [
      'POST /token HTTP/1.1', `Host: 127.0.0.1:${t.gateway.port}`, `Authorization: ${basic(SVC.client_id, SVC.client_secret)}`,
      'Content-Type: application/x-www-form-urlencoded', `Content-Length: ${body.length}`, `DPoP: ${one}`, `DPoP: ${two}`,
      'Connection: close', '', body,
    ].join('\r\n'))
    expect(res.status).toBe(400)
    expect(JSON.parse(res.body)).toMatchObject({ error: 'invalid_dpop_proof', error_description: 'the request carries more than one DPoP header' })
    expect(await storedAccessTokens(t)).toBe(0)
    // Either proof alone still works: neither was spent.
    expect((await rawClientCredentials(t, one)).status).toBe(200)
  })

  it('the htu is the issuer\'s token endpoint, whatever Host the request names', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const send = async (host: string, proof: string) => {
      const body = 'grant_type=client_credentials'
      const res = await rawRequest(t.gateway.port, [
        'POST /token HTTP/1.1', `Host: ${host}`, `Authorization: ${basic(SVC.client_id, SVC.client_secret)}`,
        'Content-Type: application/x-www-form-urlencoded', `Content-Length: ${body.length}`, `DPoP: ${proof}`, 'Connection: close', '', body,
      ].join('\r\n'))
      return [res.status, (JSON.parse(res.body) as Record<string, unknown>).error ?? 'none']
    }
    expect(await send('evil.example', await rawProof(t, key, { htu: 'http://evil.example/token' }))).toEqual([400, 'invalid_dpop_proof'])
    expect(await send('evil.example', await rawProof(t, key))).toEqual([200, 'none'])
  })
})

describe('DPoP at the token endpoint: nonces (dpop.nonce: true)', () => {
  it('answers use_dpop_nonce with a DPoP-Nonce first; oauth4webapi retries with it and gets a bound token', async (context) => {
    const t = await start(context, {}, { dpop: { nonce: true } })
    const client = { client_id: SVC.client_id }
    const DPoP = dpopOf(client, await keyPair())
    const first = await clientCredentials(t, SVC, DPoP)
    expect(first.status).toBe(400)
    expect(first.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{30}$/)
    let raised: unknown
    try { await oauth.processClientCredentialsResponse(t.as, client, first) } catch (error) { raised = error }
    expect(oauth.isDPoPNonceError(raised)).toBe(true)
    const second = await clientCredentials(t, SVC, DPoP)
    const tokens = await oauth.processClientCredentialsResponse(t.as, client, second)
    expect(tokens.token_type).toBe('dpop')
    expect(await storedAccessTokens(t)).toBe(1)
    expect(await errorsCounted(t, 'use_dpop_nonce')).toBe(1)
  })

  it('every /token answer carries DPoP-Nonce, Bearer successes and errors included, its CORS preflight and 405 too, and CORS exposes it', async (context) => {
    const t = await start(context, {}, { dpop: { nonce: true } })
    const bearer = await rawClientCredentials(t)
    expect(bearer.status).toBe(200)
    expect(bearer.headers.get('dpop-nonce')).not.toBeNull()
    expect(bearer.headers.get('access-control-expose-headers')).toContain('dpop-nonce')
    const wrongSecret = await rawClientCredentials(t, undefined, { ...SVC, client_secret: 'not-the-secret-0123456789' })
    expect(wrongSecret.status).toBe(401)
    expect(wrongSecret.headers.get('dpop-nonce')).not.toBeNull()
    const notAForm = await fetch(`${t.gateway.url}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
    expect(notAForm.status).toBe(400)
    expect(notAForm.headers.get('dpop-nonce')).not.toBeNull()
    const tooLarge = await postForm(t.gateway, '/token', { grant_type: 'client_credentials', padding: 'x'.repeat(70_000) })
    expect([tooLarge.status, tooLarge.body.error]).toEqual([400, 'invalid_request'])
    expect(tooLarge.headers.get('dpop-nonce')).not.toBeNull()
    // The CORS preflight a browser sends first, and the 405 of another method.
    const preflight = await fetch(`${t.gateway.url}/token`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{30}$/)
    const get = await fetch(`${t.gateway.url}/token`)
    expect([get.status, get.headers.get('allow')]).toEqual([405, 'POST'])
    expect(get.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{30}$/)
  })

  it('a forged nonce and one two lifetimes old get use_dpop_nonce; the current one is accepted', async (context) => {
    const clock = testClock()
    const t = await start(context, {}, { dpop: { nonce: true, nonce_lifetime: '1m' } }, clock)
    const key = await keyPair()
    const nonce = (await rawClientCredentials(t)).headers.get('dpop-nonce')!
    const forged = await rawClientCredentials(t, await rawProof(t, key, { nonce: 'A'.repeat(30) }, {}, clock.seconds()))
    expect([forged.status, forged.body.error]).toEqual([400, 'use_dpop_nonce'])
    expect(forged.headers.get('dpop-nonce')).toBe(nonce)
    const missing = await rawClientCredentials(t, await rawProof(t, key, {}, {}, clock.seconds()))
    expect([missing.status, missing.body.error]).toEqual([400, 'use_dpop_nonce'])
    clock.advance(2 * 60_000)
    const stale = await rawClientCredentials(t, await rawProof(t, key, { nonce }, {}, clock.seconds()))
    expect([stale.status, stale.body.error]).toEqual([400, 'use_dpop_nonce'])
    const fresh = stale.headers.get('dpop-nonce')!
    expect(fresh).not.toBe(nonce)
    const accepted = await rawClientCredentials(t, await rawProof(t, key, { nonce: fresh }, {}, clock.seconds()))
    expect([accepted.status, accepted.body.token_type]).toEqual([200, 'DPoP'])
  })
})

describe('DPoP at registration and in the config', () => {
  it('a registered client may ask for dpop_bound_access_tokens (boolean only), and it is honoured', async (context) => {
    const IAT = 'initial-access-token-0123456789'
    const t = await start(context, {
      registration: { enabled: true, initial_access_token: IAT, policy: { scopes: ['orders:read'], grant_types: ['client_credentials'], client_types: ['confidential'] } },
    })
    const bad = await register(t.gateway, { grant_types: ['client_credentials'], dpop_bound_access_tokens: 'yes' }, { token: IAT })
    expect([bad.status, bad.body.error]).toEqual([400, 'invalid_client_metadata'])
    const made = await register(t.gateway, { grant_types: ['client_credentials'], dpop_bound_access_tokens: true }, { token: IAT })
    expect(made.status).toBe(201)
    expect(made.body.dpop_bound_access_tokens).toBe(true)
    const caller = { client_id: made.body.client_id as string, client_secret: made.body.client_secret as string }
    const refused = await rawClientCredentials(t, undefined, caller)
    expect([refused.status, refused.body.error]).toEqual([400, 'invalid_request'])
    const bound = await rawClientCredentials(t, await rawProof(t, await keyPair()), caller)
    expect([bound.status, bound.body.token_type]).toEqual([200, 'DPoP'])
  })

  it('warns when nonces are on with a Redis store and no nonce_secret', () => {
    const config = (dpop: Record<string, unknown>) => ({
      dpop, authorization_server: { enabled: true, issuer: 'https://as.example', store: { type: 'redis', url: 'redis://127.0.0.1:6379' } },
    }) as unknown as GatewayConfig
    const warned = (dpop: Record<string, unknown>) => authorizationServerWarnings(config(dpop)).some((warning) => warning.includes('nonce_secret'))
    expect(warned({ nonce: true })).toBe(true)
    expect(warned({ nonce: true, nonce_secret: 'x'.repeat(32) })).toBe(false)
    expect(warned({ nonce: false })).toBe(false)
  })
})

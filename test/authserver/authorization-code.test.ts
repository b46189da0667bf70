/**
 * grant_type=authorization_code with PKCE (checklist §3.1 AC, §3.2 PK, A-12, A-13) against the real
 * gateway and embedded server on loopback. Codes come from issueAuthorizationCode — the function
 * /authorize calls once the user has consented — run on the live server's own context
 * (`app.authServer.ctx`), so each test sets the bindings it redeems against; everything after that is
 * HTTP. The same grant reached through /authorize and the pages is in test/authserver/authorize.test.ts.
 */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { codeId, issueAuthorizationCode, type AuthorizationCodeRecord, type IssueAuthorizationCode } from '../../src/authserver/authorization-codes.js'
import type { AuthServerContext } from '../../src/authserver/context.js'
import { authorizationCodeGrant } from '../../src/authserver/grants/authorization-code.js'
import { s256 } from '../../src/authserver/pkce.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, TV1, TV2, basic, callApi, postForm, refresh, type OAuthResponse } from '../support/authserver.js'
import { testClock } from '../support/clock.js'

type Gateway = RunningGateway & { issuer: string }

const R2 = 'https://app.example.com/cb2'
const NATIVE = 'http://127.0.0.1/cb'
// TV-2 (OAuth 2.1 draft-15 §4.1.1): the pair every code below is issued with unless a test says otherwise.
const { verifier: VERIFIER, challenge: CHALLENGE } = TV2
const OTHER_VERIFIER = TV1.verifier

interface Caller { client_id: string; client_secret?: string; auth: 'basic' | 'post' | 'none' }
const CONF_BASIC: Caller = { client_id: 'conf-basic', client_secret: 'conf-basic-secret-0123456789', auth: 'basic' }
const CONF_POST: Caller = { client_id: 'conf-post', client_secret: 'conf-post-secret-0123456789', auth: 'post' }
const MULTI: Caller = { client_id: 'multi', client_secret: 'multi-secret-0123456789ab', auth: 'basic' }
const SPA: Caller = { client_id: 'spa', auth: 'none' }
const CODE_ONLY: Caller = { client_id: 'code-only', client_secret: 'code-only-secret-01234567', auth: 'basic' }
const NO_PKCE: Caller = { client_id: 'no-pkce', client_secret: 'no-pkce-secret-0123456789', auth: 'basic' }
/** The resource server: the access tokens' audience, so introspection shows it their content (IN-06). */
const RS = { client_id: 'orders-api', client_secret: 'rs-secret-0123456789abc' }

/** The checklist's fixture (conf-basic, conf-post, multi, spa), plus a client without refresh_token and one that opted out of PKCE. */
function setup(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const code = ['authorization_code', 'refresh_token']
  const scopes = ['orders:read', 'orders:write', 'profile']
  const confidential = ({ client_id, client_secret }: Caller, method: string) =>
    ({ client_id, client_secret, token_endpoint_auth_method: method })
  return {
    access_token: { audience: [RS.client_id] },
    clients: [
      { ...confidential(CONF_BASIC, 'client_secret_basic'), grant_types: code, redirect_uris: [R1], scopes },
      { ...confidential(CONF_POST, 'client_secret_post'), grant_types: code, redirect_uris: [R1], scopes },
      { ...confidential(MULTI, 'client_secret_basic'), grant_types: code, redirect_uris: [R1, R2], scopes },
      { client_id: SPA.client_id, token_endpoint_auth_method: 'none', grant_types: code, redirect_uris: [R1], scopes },
      { ...confidential(CODE_ONLY, 'client_secret_basic'), grant_types: ['authorization_code'], redirect_uris: [R1], scopes },
      { ...confidential(NO_PKCE, 'client_secret_basic'), grant_types: code, redirect_uris: [NATIVE], scopes, require_pkce: false },
      { ...RS, grant_types: ['client_credentials'], scopes: ['orders:read'] },
    ],
    users: [{ ...ALICE, claims: { name: 'Alice' } }],
    ...extra,
  }
}

async function start(context: TestContext, extra: Record<string, unknown> = {}, options: { now?: () => number } = {}): Promise<Gateway> {
  const gateway = await startAuthServerGateway(setup(extra), {}, options)
  context.onTestFinished(() => gateway.close())
  return gateway
}

function contextOf(gateway: Gateway): AuthServerContext {
  const authServer = gateway.app.authServer
  if (!authServer) throw new Error('the embedded authorization server is not enabled')
  return authServer.ctx
}

/** What /authorize does once alice has approved: a code for `caller`, with the TV-2 challenge and R1 sent. */
async function issueCode(gateway: Gateway, caller: Caller, overrides: Partial<IssueAuthorizationCode> = {}): Promise<string> {
  const ctx = contextOf(gateway)
  const client = ctx.clients.find(caller.client_id)!
  return issueAuthorizationCode(ctx, {
    client,
    redirectUri: client.redirectUris[0]!,
    redirectUriWasSent: true,
    scope: ['orders:read'],
    sub: 'alice',
    authTime: Math.floor(ctx.now() / 1000),
    codeChallenge: CHALLENGE,
    codeChallengeMethod: 'S256',
    ...overrides,
  })
}

/** The token request, authenticated the way `caller` is registered; `form` adds or overrides parameters. */
function redeem(gateway: Gateway, caller: Caller, form: Record<string, string | undefined>): Promise<OAuthResponse> {
  const body: Record<string, string> = { grant_type: 'authorization_code' }
  if (caller.auth === 'post') Object.assign(body, { client_id: caller.client_id, client_secret: caller.client_secret })
  if (caller.auth === 'none') body.client_id = caller.client_id
  for (const [name, value] of Object.entries(form)) if (value !== undefined) body[name] = value
  const headers: Record<string, string> = caller.auth === 'basic' ? { authorization: basic(caller.client_id, caller.client_secret!) } : {}
  return postForm(gateway, '/token', body, headers)
}

/** The usual, valid token request for a code issued by issueCode. */
const valid = (code: string, extra: Record<string, string | undefined> = {}) =>
  ({ code, redirect_uri: R1, code_verifier: VERIFIER, ...extra })

async function introspect(gateway: Gateway, token: string): Promise<Record<string, unknown>> {
  return (await postForm(gateway, '/introspect', { token }, { authorization: basic(RS.client_id, RS.client_secret) })).body
}

const refreshAs = (gateway: Gateway, caller: Caller, refreshToken: string) =>
  caller.auth === 'basic'
    ? postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: refreshToken }, { authorization: basic(caller.client_id, caller.client_secret!) })
    : refresh(gateway, refreshToken, { client_id: caller.client_id, client_secret: caller.client_secret ?? '' })

const errorOf = (res: OAuthResponse) => [res.status, res.body.error]

interface Tokens { access_token: string; refresh_token?: string; scope: string; token_type: string; expires_in: number }

describe('authorization_code grant', () => {
  let gateway: Gateway
  beforeAll(async () => { gateway = await startAuthServerGateway(setup()) })
  afterAll(() => gateway.close())

  it('AC-01 conf-basic with a Basic header (the TV-5 request) gets a T-04 response whose access token the gateway accepts', async () => {
    const code = await issueCode(gateway, CONF_BASIC)
    const res = await redeem(gateway, CONF_BASIC, valid(code))
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('pragma')).toBe('no-cache')
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    const body = res.body as unknown as Tokens
    expect(body).toMatchObject({ token_type: 'Bearer', scope: 'orders:read' })
    expect(Number.isInteger(body.expires_in) && body.expires_in > 0).toBe(true)
    expect(body.refresh_token).toMatch(/^prt_/)
    expect(body).not.toHaveProperty('id_token')
    const claims = decodeJwt(body.access_token)
    expect(claims).toMatchObject({ sub: 'alice', client_id: CONF_BASIC.client_id, scope: 'orders:read', aud: 'orders-api', iss: gateway.issuer })
    expect(typeof claims.auth_time).toBe('number')
    const api = await callApi(gateway, body.access_token)
    expect(api.status).toBe(200)
    expect((await api.json() as { headers: Record<string, string> }).headers['x-auth-subject']).toBe('alice')
  })

  it('AC-01 conf-post with client_id and client_secret in the body', async () => {
    const res = await redeem(gateway, CONF_POST, valid(await issueCode(gateway, CONF_POST)))
    expect(res.status).toBe(200)
    expect(decodeJwt(res.body.access_token as string).client_id).toBe(CONF_POST.client_id)
  })

  it('AC-01 the public spa client with client_id and code_verifier only, and its refresh token works', async () => {
    const res = await redeem(gateway, SPA, valid(await issueCode(gateway, SPA)))
    expect(res.status).toBe(200)
    expect(res.headers.get('access-control-allow-origin')).toBe('*')
    const refreshed = await refreshAs(gateway, SPA, res.body.refresh_token as string)
    expect(refreshed.status).toBe(200)
  })

  it('A-12 A-13 G-09 a code is 256 random bits, stored only as its SHA-256 with its bindings, for 60 s', async () => {
    const ctx = contextOf(gateway)
    const code = await issueCode(gateway, MULTI, { redirectUri: R2, scope: ['orders:read', 'profile'], nonce: 'n-0S6_WzA2Mj' })
    expect(code).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(await ctx.store.find('authorization_code', code)).toBeUndefined()
    const stored = (await ctx.store.list('authorization_code')).find((record) => record.id === codeId(code))!
    expect(JSON.stringify(stored)).not.toContain(code)
    const value = stored.value as unknown as AuthorizationCodeRecord
    expect(value).toMatchObject({
      clientId: MULTI.client_id, redirectUri: R2, redirectUriWasSent: true, scope: ['orders:read', 'profile'], sub: 'alice',
      nonce: 'n-0S6_WzA2Mj', codeChallenge: CHALLENGE, codeChallengeMethod: 'S256',
    })
    expect(value.expiresAt - value.issuedAt).toBe(60)
    expect(stored.expiresAt - ctx.now()).toBeLessThanOrEqual(60_000)
    expect(stored.expiresAt - ctx.now()).toBeGreaterThan(55_000)
  })

  it('AC-02 answers invalid_request without code, and invalid_grant for an unknown or garbage code', async () => {
    expect(errorOf(await redeem(gateway, CONF_BASIC, { redirect_uri: R1, code_verifier: VERIFIER }))).toEqual([400, 'invalid_request'])
    expect(errorOf(await redeem(gateway, CONF_BASIC, valid('SplxlOBeZQQYbYS6WxSbIA')))).toEqual([400, 'invalid_grant'])
    expect(errorOf(await redeem(gateway, CONF_BASIC, valid('A'.repeat(43))))).toEqual([400, 'invalid_grant'])
    expect(errorOf(await redeem(gateway, CONF_BASIC, valid('%00 not a code ☃')))).toEqual([400, 'invalid_grant'])
  })

  it('AC-03 another client\'s code is invalid_grant, the owner without credentials is invalid_client, and neither consumes it', async () => {
    const code = await issueCode(gateway, CONF_BASIC)
    expect(errorOf(await redeem(gateway, CONF_POST, valid(code)))).toEqual([400, 'invalid_grant'])
    expect(errorOf(await redeem(gateway, SPA, valid(code)))).toEqual([400, 'invalid_grant'])
    expect(errorOf(await redeem(gateway, { client_id: CONF_BASIC.client_id, auth: 'none' }, valid(code)))).toEqual([401, 'invalid_client'])
    expect(errorOf(await redeem(gateway, { ...CONF_BASIC, client_secret: 'wrong-secret-0123456789' }, valid(code)))).toEqual([401, 'invalid_client'])
    expect((await redeem(gateway, CONF_BASIC, valid(code))).status).toBe(200)
  })

  it('AC-05 redirect_uri sent at /authorize: missing is invalid_request, any other string (A-03 variants included) invalid_grant', async () => {
    const code = await issueCode(gateway, MULTI)  // sent as R1
    expect(errorOf(await redeem(gateway, MULTI, valid(code, { redirect_uri: undefined })))).toEqual([400, 'invalid_request'])
    for (const other of [R2, `${R1}/`, 'https://APP.example.com/callback', 'https://app.example.com/%63allback',
      'https://app.example.com:443/callback', `${R1}?x=1`, `${R1}#f`, 'http://app.example.com/callback']) {
      expect(errorOf(await redeem(gateway, MULTI, valid(code, { redirect_uri: other }))), other).toEqual([400, 'invalid_grant'])
    }
    // AC-07 order: none of these consumed the code.
    expect((await redeem(gateway, MULTI, valid(code))).status).toBe(200)
  })

  it('AC-05 redirect_uri omitted at /authorize: the token request may omit it, or must send the one used', async () => {
    const omitted = await issueCode(gateway, CONF_BASIC, { redirectUriWasSent: false })
    expect((await redeem(gateway, CONF_BASIC, valid(omitted, { redirect_uri: undefined }))).status).toBe(200)
    const repeated = await issueCode(gateway, CONF_BASIC, { redirectUriWasSent: false })
    expect(errorOf(await redeem(gateway, CONF_BASIC, valid(repeated, { redirect_uri: R2 })))).toEqual([400, 'invalid_grant'])
    expect((await redeem(gateway, CONF_BASIC, valid(repeated))).status).toBe(200)
  })

  it('AC-07 a replay that is not otherwise valid is invalid_grant and revokes nothing', async () => {
    const code = await issueCode(gateway, CONF_BASIC)
    const first = (await redeem(gateway, CONF_BASIC, valid(code))).body as unknown as Tokens
    expect((await callApi(gateway, first.access_token)).status).toBe(200)
    const failures = [
      await redeem(gateway, CONF_BASIC, valid(code, { code_verifier: OTHER_VERIFIER })),   // wrong verifier
      await redeem(gateway, CONF_BASIC, valid(code, { code_verifier: undefined })),        // no verifier
      await redeem(gateway, CONF_BASIC, valid(code, { redirect_uri: R2 })),                // wrong redirect_uri
      await redeem(gateway, CONF_POST, valid(code)),                                       // another client
    ]
    expect(failures.map(errorOf)).toEqual(Array.from({ length: 4 }, () => [400, 'invalid_grant']))
    expect(errorOf(await redeem(gateway, { ...CONF_BASIC, client_secret: 'wrong-secret-0123456789' }, valid(code)))).toEqual([401, 'invalid_client'])
    expect(await introspect(gateway, first.access_token)).toMatchObject({ active: true, sub: 'alice' })
    expect((await callApi(gateway, first.access_token)).status).toBe(200)
    const refreshed = await refreshAs(gateway, CONF_BASIC, first.refresh_token!)
    expect(refreshed.status).toBe(200)
  })

  it('AC-09 no refresh_token for a client not registered for refresh_token; scope is the granted scope', async () => {
    const code = await issueCode(gateway, CODE_ONLY, { scope: ['orders:write', 'profile'] })
    const res = await redeem(gateway, CODE_ONLY, valid(code))
    expect(res.status).toBe(200)
    expect(res.body).not.toHaveProperty('refresh_token')
    expect(res.body.scope).toBe('orders:write profile')
    expect(decodeJwt(res.body.access_token as string).scope).toBe('orders:write profile')
    const withRefresh = await redeem(gateway, CONF_BASIC, valid(await issueCode(gateway, CONF_BASIC, { scope: ['profile'] })))
    expect(withRefresh.body).toMatchObject({ scope: 'profile', refresh_token: expect.any(String) })
  })

  it('PK-02 a code issued with a challenge and redeemed without code_verifier is invalid_grant', async () => {
    const code = await issueCode(gateway, SPA)
    expect(errorOf(await redeem(gateway, SPA, valid(code, { code_verifier: undefined })))).toEqual([400, 'invalid_grant'])
    expect((await redeem(gateway, SPA, valid(code))).status).toBe(200)
  })

  it('PK-03 a malformed code_verifier is invalid_request: 42 and 129 characters, +, =, / or %', async () => {
    const code = await issueCode(gateway, SPA)
    for (const verifier of ['a'.repeat(42), 'a'.repeat(129), `${'a'.repeat(42)}+`, `${'a'.repeat(42)}=`, `${'a'.repeat(42)}/`,
      `${'a'.repeat(42)}%`]) {
      expect(errorOf(await redeem(gateway, SPA, valid(code, { code_verifier: verifier }))), verifier).toEqual([400, 'invalid_request'])
    }
    expect((await redeem(gateway, SPA, valid(code))).status).toBe(200)
  })

  it('PK-04 a verifier that does not match is invalid_grant; the TV-1 pair and a 128-character verifier are accepted', async () => {
    const code = await issueCode(gateway, SPA)
    expect(errorOf(await redeem(gateway, SPA, valid(code, { code_verifier: OTHER_VERIFIER })))).toEqual([400, 'invalid_grant'])
    expect(errorOf(await redeem(gateway, SPA, valid(code, { code_verifier: CHALLENGE })))).toEqual([400, 'invalid_grant'])  // plain
    const tv1 = await issueCode(gateway, SPA, { codeChallenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM' })
    expect((await redeem(gateway, SPA, valid(tv1, { code_verifier: OTHER_VERIFIER }))).status).toBe(200)
    const long = 'Az09-._~'.repeat(16)
    const longCode = await issueCode(gateway, SPA, { codeChallenge: s256(long) })
    expect((await redeem(gateway, SPA, valid(longCode, { code_verifier: long }))).status).toBe(200)
  })

  it('PK-05 a code_verifier for a code issued without a challenge is a downgrade: invalid_request', async () => {
    const code = await issueCode(gateway, NO_PKCE, { codeChallenge: undefined, codeChallengeMethod: undefined })
    const res = await redeem(gateway, NO_PKCE, { code, redirect_uri: NATIVE, code_verifier: VERIFIER })
    expect(errorOf(res)).toEqual([400, 'invalid_request'])
    // The client that opted out of PKCE (PK-06) redeems the same code without a verifier.
    expect((await redeem(gateway, NO_PKCE, { code, redirect_uri: NATIVE })).status).toBe(200)
  })

  it('PK-06 PKCE is required for public and, by default, confidential clients: no code without a challenge, none honoured', async () => {
    const noChallenge = { codeChallenge: undefined, codeChallengeMethod: undefined }
    await expect(issueCode(gateway, SPA, noChallenge)).rejects.toMatchObject({ code: 'invalid_request' })
    await expect(issueCode(gateway, CONF_BASIC, noChallenge)).rejects.toMatchObject({ code: 'invalid_request' })
    // PK-01: only S256; a challenge without a method would be plain (RFC 7636 §4.3).
    await expect(issueCode(gateway, SPA, { codeChallengeMethod: 'plain' as 'S256' })).rejects.toMatchObject({ code: 'invalid_request' })
    await expect(issueCode(gateway, SPA, { codeChallengeMethod: undefined })).rejects.toMatchObject({ code: 'invalid_request' })
    await expect(issueCode(gateway, SPA, { codeChallenge: 'too-short' })).rejects.toMatchObject({ code: 'invalid_request' })
    // A code stored without a challenge (say, before the client's registration changed) is not honoured.
    const ctx = contextOf(gateway)
    const now = Math.floor(ctx.now() / 1000)
    const record: AuthorizationCodeRecord = {
      clientId: SPA.client_id, redirectUri: R1, redirectUriWasSent: true, scope: ['orders:read'], sub: 'alice', authTime: now,
      issuedAt: now, expiresAt: now + 60,
    }
    await ctx.store.upsert('authorization_code', codeId('legacy-code-without-pkce'), { ...record }, 60)
    const res = await redeem(gateway, SPA, { code: 'legacy-code-without-pkce', redirect_uri: R1 })
    expect(errorOf(res)).toEqual([400, 'invalid_grant'])
  })

  it('T-02 the grant is served only to clients registered for it: a client_credentials client is unauthorized_client', async () => {
    const res = await postForm(gateway, '/token', { grant_type: 'authorization_code', code: 'x', ...RS })
    expect(errorOf(res)).toEqual([400, 'unauthorized_client'])
  })
})

describe('authorization_code expiry', () => {
  it('AC-04 a code is redeemable for 60 s after issue and invalid_grant from then on', async (context) => {
    const clock = testClock()
    const gateway = await start(context, {}, { now: clock.now })
    const early = await issueCode(gateway, CONF_BASIC)
    const late = await issueCode(gateway, CONF_BASIC)
    clock.advance(59_000)
    expect((await redeem(gateway, CONF_BASIC, valid(early))).status).toBe(200)
    clock.advance(1_000)
    expect(errorOf(await redeem(gateway, CONF_BASIC, valid(late)))).toEqual([400, 'invalid_grant'])
  })
})

describe.each([
  { store: 'memory', format: 'jwt' },
  { store: 'sqlite', format: 'opaque' },
])('authorization_code single use ($store store, $format access tokens)', ({ store, format }) => {
  const extra = () => ({
    access_token: { format, audience: [RS.client_id] },
    ...(store === 'sqlite' && { store: { type: 'sqlite', path: path.join(mkdtempSync(path.join(tmpdir(), 'portcullis-ac-')), 'as.db') } }),
  })

  it('AC-06 a valid second redemption is invalid_grant and revokes the grant: introspection inactive, refresh invalid_grant, gateway 401', async (context) => {
    const gateway = await start(context, extra())
    const code = await issueCode(gateway, CONF_BASIC)
    const first = (await redeem(gateway, CONF_BASIC, valid(code))).body as unknown as Tokens
    // A refreshed access token belongs to the same grant, and dies with it.
    const refreshed = (await refreshAs(gateway, CONF_BASIC, first.refresh_token!)).body as unknown as Tokens
    for (const token of [first.access_token, refreshed.access_token]) {
      expect(await introspect(gateway, token)).toMatchObject({ active: true })
      expect((await callApi(gateway, token)).status).toBe(200)  // in the gateway's cache from now on
    }

    const replay = await redeem(gateway, CONF_BASIC, valid(code))
    expect(errorOf(replay)).toEqual([400, 'invalid_grant'])
    expect(replay.body).not.toHaveProperty('access_token')
    for (const token of [first.access_token, refreshed.access_token]) {
      expect(await introspect(gateway, token)).toEqual({ active: false })
      const api = await callApi(gateway, token)
      expect(api.status).toBe(401)
      expect(api.headers.get('www-authenticate')).toContain('error="invalid_token"')
    }
    for (const token of [first.refresh_token!, refreshed.refresh_token!]) {
      expect(errorOf(await refreshAs(gateway, CONF_BASIC, token))).toEqual([400, 'invalid_grant'])
    }
    // And the code stays spent.
    expect(errorOf(await redeem(gateway, CONF_BASIC, valid(code)))).toEqual([400, 'invalid_grant'])
  })

  it('AC-08 ten parallel redemptions give exactly one 200 and nine invalid_grant; the race is a replay, so its grant ends revoked', async (context) => {
    const gateway = await start(context, extra())
    const code = await issueCode(gateway, SPA)
    const results = await Promise.all(Array.from({ length: 10 }, () => redeem(gateway, SPA, valid(code))))
    const winners = results.filter((res) => res.status === 200)
    expect(winners).toHaveLength(1)
    expect(results.filter((res) => errorOf(res).join() === '400,invalid_grant')).toHaveLength(9)
    // AC-06 makes no exception for a redemption that arrives at the same moment: an attacker racing the
    // client is exactly the case it exists for. The one success's tokens are therefore dead.
    const winner = winners[0]!.body as unknown as Tokens
    expect(await introspect(gateway, winner.access_token)).toEqual({ active: false })
    expect((await callApi(gateway, winner.access_token)).status).toBe(401)
    expect(errorOf(await refreshAs(gateway, SPA, winner.refresh_token!))).toEqual([400, 'invalid_grant'])
  })

  it('AC-08 ten redemptions that all read the code before any consumes it: the store\'s atomic consume lets one through', async (context) => {
    // Over HTTP the ten requests reach the handler a few event-loop turns apart; called directly, all ten
    // find the code unconsumed and then meet at consume, which alone decides.
    const gateway = await start(context, extra())
    const ctx = contextOf(gateway)
    const client = ctx.clients.find(SPA.client_id)!
    const code = await issueCode(gateway, SPA)
    const form = new Map(Object.entries(valid(code)))
    const outcomes = await Promise.allSettled(Array.from({ length: 10 }, () =>
      authorizationCodeGrant.handle({ form, client, ip: '127.0.0.1', audience: [RS.client_id], ctx })))
    expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1)
    const refused = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason as { code: string }] : []))
    expect(refused.map((error) => error.code)).toEqual(Array.from({ length: 9 }, () => 'invalid_grant'))
  })
})

describe('a strict client (oauth4webapi) redeems a code', () => {
  const insecure = { [oauth.allowInsecureRequests]: true } as const

  for (const { caller, auth } of [
    { caller: CONF_BASIC, auth: () => oauth.ClientSecretBasic(CONF_BASIC.client_secret!) },
    { caller: SPA, auth: () => oauth.None() },
  ]) {
    it(`AC-01 ${caller.client_id}: callback with code, state and iss validated, code + PKCE exchanged, API called, token refreshed`, async (context) => {
      const gateway = await start(context)
      const issuer = new URL(gateway.issuer)
      const discovered = await oauth.processDiscoveryResponse(issuer,
        await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
      // RFC 9207: the callback will carry iss, and the library must insist on it.
      const as: oauth.AuthorizationServer = { ...discovered, authorization_response_iss_parameter_supported: true }
      const client: oauth.Client = { client_id: caller.client_id }
      const verifier = oauth.generateRandomCodeVerifier()
      const challenge = await oauth.calculatePKCECodeChallenge(verifier)
      expect(s256(verifier)).toBe(challenge)
      const state = oauth.generateRandomState()

      // Stands in for /authorize's redirect: what lands on R1 is code, state and iss.
      const code = await issueCode(gateway, caller, { codeChallenge: challenge })
      const callback = new URL(`${R1}?${new URLSearchParams({ code, state, iss: gateway.issuer })}`)
      const params = oauth.validateAuthResponse(as, client, callback, state)
      const tokens = await oauth.processAuthorizationCodeResponse(as, client,
        await oauth.authorizationCodeGrantRequest(as, client, auth(), params, R1, verifier, insecure))
      expect(tokens).toMatchObject({ token_type: 'bearer', scope: 'orders:read' })
      expect(tokens.id_token).toBeUndefined()
      expect((await callApi(gateway, tokens.access_token)).status).toBe(200)

      const refreshed = await oauth.processRefreshTokenResponse(as, client,
        await oauth.refreshTokenGrantRequest(as, client, auth(), tokens.refresh_token!, insecure))
      expect(refreshed.refresh_token).not.toBe(tokens.refresh_token)

      // The same code again: the library surfaces invalid_grant.
      await expect(oauth.processAuthorizationCodeResponse(as, client,
        await oauth.authorizationCodeGrantRequest(as, client, auth(), params, R1, verifier, insecure)))
        .rejects.toMatchObject({ error: 'invalid_grant' })
      // A callback without iss, or from another issuer, never reaches the token endpoint.
      expect(() => oauth.validateAuthResponse(as, client, new URLSearchParams({ code, state }), state)).toThrow()
      expect(() => oauth.validateAuthResponse(as, client, new URLSearchParams({ code, state, iss: `${gateway.issuer}/` }), state)).toThrow()
    })
  }
})

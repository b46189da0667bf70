/**
 * Issue 20 end to end: oauth4webapi (a client nobody here wrote) gets DPoP-bound tokens from the embedded
 * server (client_credentials; authorization code + PKCE for a public client; refresh with the bound key; JWT
 * and opaque) and calls the API through the gateway with a proof per request. What an attacker holding the
 * token or one proof tries is refused there, with nothing forwarded. With nonces on, the token endpoint and
 * the API share one nonce, so the client pays the nonce round trip once.
 */
import { createHash, randomUUID } from 'node:crypto'
import { exportJWK, SignJWT } from 'jose'
import * as oauth from 'oauth4webapi'
import { beforeEach, describe, expect, it, type TestContext } from 'vitest'
import { ALICE, R1 } from '../support/authserver.js'
import { FormBrowser, loginAndConsent } from '../support/browser.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }
const SPA: oauth.Client = { client_id: 'spa' }

let upstream: RecordingUpstream

interface Setup { gateway: RunningGateway & { issuer: string }; as: oauth.AuthorizationServer; api: URL }

async function start(context: TestContext, authorizationServer: Record<string, unknown> = {}, top: Record<string, unknown> = {}): Promise<Setup> {
  upstream = await startRecordingUpstream()
  const gateway = await startAuthServerGateway({
    clients: [
      { ...SVC, grant_types: ['client_credentials'], scopes: ['orders:read'] },
      { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: ['orders:read'] },
    ],
    users: [ALICE],
    ...authorizationServer,
  }, { upstreams: { main: { url: upstream.url } }, routes: [{ id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['orders:read'] } }], ...top })
  context.onTestFinished(async () => { await gateway.close(); await upstream.close() })
  const issuer = new URL(gateway.issuer)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  return { gateway, as, api: new URL(`${gateway.url}/api/orders/1`) }
}

beforeEach(() => { if (upstream) upstream.requests.length = 0 })

const keyPair = () => oauth.generateKeyPair('ES256', { extractable: true })

async function clientCredentials(t: Setup, DPoP: oauth.DPoPHandle): Promise<oauth.TokenEndpointResponse> {
  const send = () => oauth.clientCredentialsGrantRequest(t.as, { client_id: SVC.client_id }, oauth.ClientSecretBasic(SVC.client_secret),
    new URLSearchParams({ scope: 'orders:read' }), { DPoP, ...insecure })
  try {
    return await oauth.processClientCredentialsResponse(t.as, { client_id: SVC.client_id }, await send())
  } catch (error) {
    if (!oauth.isDPoPNonceError(error)) throw error
    return oauth.processClientCredentialsResponse(t.as, { client_id: SVC.client_id }, await send())
  }
}

const callApi = (t: Setup, token: string, DPoP: oauth.DPoPHandle) =>
  oauth.protectedResourceRequest(token, 'GET', t.api, undefined, undefined, { DPoP, ...insecure })

/** A proof built by hand: what an attacker (or a broken client) sends. */
async function handProof(key: Awaited<ReturnType<typeof keyPair>>, claims: Record<string, unknown>): Promise<string> {
  return new SignJWT({ jti: randomUUID(), iat: Math.floor(Date.now() / 1000), htm: 'GET', ...claims })
    .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: await exportJWK(key.publicKey) }).sign(key.privateKey)
}

const ath = (token: string) => createHash('sha256').update(token).digest('base64url')

async function expectRefused(res: Response, error: string): Promise<void> {
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toMatch(new RegExp(`^DPoP realm="portcullis", error="${error}"`))
  expect(upstream.requests).toHaveLength(0)
}

describe('client_credentials with DPoP, then the API', () => {
  for (const format of ['jwt', 'opaque'] as const) {
    it(`a ${format} token: accepted with proofs; refused replayed, for another URL or method, as Bearer, by another key, without ath`, async (context) => {
      const t = await start(context, { access_token: { format } })
      const key = await keyPair()
      const DPoP = oauth.DPoP({}, key)
      const tokens = await clientCredentials(t, DPoP)
      expect(tokens.token_type).toBe('dpop')
      for (let i = 0; i < 3; i++) expect((await callApi(t, tokens.access_token, DPoP)).status).toBe(200)
      expect(upstream.requests).toHaveLength(3)
      upstream.requests.length = 0

      const token = tokens.access_token
      const good = { htu: t.api.href, ath: ath(token) }
      const send = (dpop: string, scheme = 'DPoP', method = 'GET') => fetch(t.api, { method, headers: { authorization: `${scheme} ${token}`, dpop } })
      const once = await handProof(key, good)
      expect((await send(once)).status).toBe(200)
      upstream.requests.length = 0
      await expectRefused(await send(once), 'invalid_dpop_proof')
      await expectRefused(await send(await handProof(key, { ...good, htu: `${t.gateway.url}/api/orders/2` })), 'invalid_dpop_proof')
      await expectRefused(await send(await handProof(key, good), 'DPoP', 'DELETE'), 'invalid_dpop_proof')
      await expectRefused(await send(await handProof(key, { htu: t.api.href })), 'invalid_dpop_proof')
      await expectRefused(await send(await handProof(await keyPair(), good)), 'invalid_dpop_proof')
      await expectRefused(await fetch(t.api, { headers: { authorization: `Bearer ${token}` } }), 'invalid_token')
    })
  }
})

describe('authorization code + PKCE with DPoP (a public client), refresh with the bound key, the API', () => {
  it('every token works with its key\'s proofs; a refresh with another key is refused and changes nothing', async (context) => {
    const t = await start(context)
    const key = await keyPair()
    const DPoP = oauth.DPoP(SPA, key)
    const verifier = oauth.generateRandomCodeVerifier()
    const state = oauth.generateRandomState()
    const url = new URL(t.as.authorization_endpoint!)
    url.search = new URLSearchParams({
      response_type: 'code', client_id: 'spa', redirect_uri: R1, scope: 'orders:read', state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
      dpop_jkt: await DPoP.calculateThumbprint(),
    }).toString()
    const browser = new FormBrowser(t.gateway.url)
    const answer = await loginAndConsent(browser, await browser.get(url.href), ALICE)
    const params = oauth.validateAuthResponse(t.as, SPA, new URL(answer.location!), state)
    const tokens = await oauth.processAuthorizationCodeResponse(t.as, SPA,
      await oauth.authorizationCodeGrantRequest(t.as, SPA, oauth.None(), params, R1, verifier, { DPoP, ...insecure }))
    expect(tokens.token_type).toBe('dpop')
    expect((await callApi(t, tokens.access_token, DPoP)).status).toBe(200)

    const thief = oauth.DPoP(SPA, await keyPair())
    const stolen = await oauth.refreshTokenGrantRequest(t.as, SPA, oauth.None(), tokens.refresh_token!, { DPoP: thief, ...insecure })
    expect(stolen.status).toBe(400)
    expect(((await stolen.json()) as { error: string }).error).toBe('invalid_grant')

    const refreshed = await oauth.processRefreshTokenResponse(t.as, SPA,
      await oauth.refreshTokenGrantRequest(t.as, SPA, oauth.None(), tokens.refresh_token!, { DPoP, ...insecure }))
    expect(refreshed.token_type).toBe('dpop')
    expect((await callApi(t, refreshed.access_token, DPoP)).status).toBe(200)
    expect(upstream.requests).toHaveLength(2)
    upstream.requests.length = 0
    // The thief's proofs do not open the API with the stolen access token either.
    const refused = await oauth.protectedResourceRequest(refreshed.access_token, 'GET', t.api, undefined, undefined, { DPoP: thief, ...insecure })
      .then(() => undefined, (error: unknown) => error)
    expect(refused).toBeInstanceOf(oauth.WWWAuthenticateChallengeError)
    const challenge = (refused as oauth.WWWAuthenticateChallengeError).cause[0]!
    expect([challenge.scheme, challenge.parameters.error]).toEqual(['dpop', 'invalid_dpop_proof'])
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('nonces (dpop.nonce: true, no nonce_secret)', () => {
  it('the client answers use_dpop_nonce once at /token, and the API accepts the same nonce at once', async (context) => {
    const t = await start(context, {}, { dpop: { nonce: true } })
    const DPoP = oauth.DPoP({}, await keyPair())
    const tokens = await clientCredentials(t, DPoP)
    // No second use_dpop_nonce: the gateway and the token endpoint sign nonces with one secret.
    const res = await callApi(t, tokens.access_token, DPoP)
    expect(res.status).toBe(200)
    expect(res.headers.get('dpop-nonce')).toBeNull()
    // A proof without a nonce is asked for one, with a fresh DPoP-Nonce; nothing forwarded.
    upstream.requests.length = 0
    const bare = await fetch(t.api, { headers: { authorization: `DPoP ${tokens.access_token}`, dpop: await handProof(await keyPair(), { htu: t.api.href, ath: ath(tokens.access_token) }) } })
    expect(bare.status).toBe(401)
    expect(bare.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{30}$/)
    expect(upstream.requests).toHaveLength(0)
  })
})

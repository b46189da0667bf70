/**
 * RFC 8707 resource indicators at the embedded server (issue 18, checklist AT-03, G-06), driven by
 * oauth4webapi against the real gateway on loopback: `resource` at /authorize is bound to the code and
 * carried through login and consent; the token request may narrow it, never widen it (§2.2); the refresh
 * token keeps the grant's whole set, so a narrowed refresh is followed by a full one; opaque tokens show
 * their `aud` to introspection and to the gateway's principal. The resources are the gateway's
 * `resources[]` (RFC 9728), served by the gateway itself; the default audience is `access_token.audience`.
 */
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { tokenHash } from '../../src/authn/token-cache.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, basic, callApi, postForm } from '../support/authserver.js'
import { FormBrowser, loginAndConsent } from '../support/browser.js'
import { authorizationUrl } from '../support/registration.js'
import { deleteKeys } from '../support/redis.js'
import { twoResources } from '../support/resources.js'
import { closedPort } from '../support/upstream.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
const DEFAULT_AUDIENCE = 'https://api.example.com'
const CONF = { client_id: 'conf', client_secret: 'conf-secret-0123456789ab' }
const client: oauth.Client = { client_id: CONF.client_id }
const auth = () => oauth.ClientSecretBasic(CONF.client_secret)
const REDIS_URL = process.env.REDIS_URL

interface Setup {
  gateway: RunningGateway & { issuer: string }
  as: oauth.AuthorizationServer
  /** The gateway's two RFC 9728 resources, `${origin}/api` and `${origin}/billing`. */
  orders: string
  billing: string
}

/** A gateway whose embedded server knows two resources besides its default audience; discovered by oauth4webapi. */
async function start(context: TestContext, authorizationServer: Record<string, unknown> = {}): Promise<Setup> {
  const port = await closedPort()
  const origin = `http://127.0.0.1:${port}`
  const { orders, billing, extra } = twoResources(origin)
  const gateway = await startAuthServerGateway({
    access_token: { audience: [DEFAULT_AUDIENCE] },
    clients: [{ ...CONF, grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [R1], scopes: ['orders:read', 'billing:read'] }],
    users: [ALICE],
    ...authorizationServer,
  }, extra, { port })
  context.onTestFinished(() => gateway.close())
  const issuer = new URL(gateway.issuer)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  return { gateway, as, orders, billing }
}

interface Flow { callback: URL; state: string; verifier: string }

/** alice through /authorize (PKCE, state), login and consent, with a `resource` parameter per entry. */
async function authorize(t: Setup, resources: readonly string[]): Promise<Flow> {
  const { url, verifier, state } = await authorizationUrl(t.gateway.issuer, CONF.client_id, R1, { resources })
  const browser = new FormBrowser(t.gateway.url)
  const answer = await loginAndConsent(browser, await browser.get(url), ALICE)
  expect(answer.location?.startsWith(`${R1}?`)).toBe(true)
  return { callback: new URL(answer.location!), state, verifier }
}

const resourceParameters = (resources?: readonly string[]) =>
  resources === undefined ? {} : { additionalParameters: resources.map((resource) => ['resource', resource]) }

/** The client's side of the callback: iss and state checked, then the code exchanged (with `resources`, if any). */
async function exchange(t: Setup, flow: Flow, resources?: readonly string[]): Promise<oauth.TokenEndpointResponse> {
  const params = oauth.validateAuthResponse(t.as, client, flow.callback, flow.state)
  return oauth.processAuthorizationCodeResponse(t.as, client, await oauth.authorizationCodeGrantRequest(
    t.as, client, auth(), params, R1, flow.verifier, { ...insecure, ...resourceParameters(resources) }))
}

async function refresh(t: Setup, refreshToken: string, resources?: readonly string[]): Promise<oauth.TokenEndpointResponse> {
  return oauth.processRefreshTokenResponse(t.as, client,
    await oauth.refreshTokenGrantRequest(t.as, client, auth(), refreshToken, { ...insecure, ...resourceParameters(resources) }))
}

const audOf = (tokens: oauth.TokenEndpointResponse) => decodeJwt(tokens.access_token).aud

/** What a refused token request raised: oauth4webapi's error for a 400 JSON body. */
async function refusal(promise: Promise<unknown>): Promise<[number, string]> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason)
  expect(error).toBeInstanceOf(oauth.ResponseBodyError)
  return [(error as oauth.ResponseBodyError).status, (error as oauth.ResponseBodyError).error]
}

describe('authorization code with resource indicators', () => {
  it('one resource at /authorize: the JWT aud is exactly that resource', async (context) => {
    const t = await start(context)
    const tokens = await exchange(t, await authorize(t, [t.orders]))
    expect(audOf(tokens)).toBe(t.orders)
  })

  it('two resources at /authorize (one of them repeated): the aud is exactly those two', async (context) => {
    const t = await start(context)
    const flow = await authorize(t, [t.orders, t.billing, t.orders])
    const tokens = await exchange(t, flow)
    expect(audOf(tokens)).toEqual([t.orders, t.billing])
  })

  it('no resource anywhere: the aud is access_token.audience, as before', async (context) => {
    const t = await start(context)
    expect(audOf(await exchange(t, await authorize(t, [])))).toBe(DEFAULT_AUDIENCE)
  })

  it('an unknown resource at /authorize goes back to the client as invalid_target, with state and iss', async (context) => {
    const t = await start(context)
    const state = oauth.generateRandomState()
    const url = new URL(t.as.authorization_endpoint!)
    url.search = new URLSearchParams([
      ['response_type', 'code'], ['client_id', CONF.client_id], ['redirect_uri', R1], ['state', state],
      ['code_challenge', await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier())], ['code_challenge_method', 'S256'],
      ['resource', t.orders], ['resource', 'https://evil.example/api'],
    ]).toString()
    const res = await new FormBrowser(t.gateway.url).get(url.href)
    expect(res.status).toBe(302)
    const callback = new URL(res.location!)
    expect(`${callback.origin}${callback.pathname}`).toBe(R1)
    expect(callback.searchParams.get('error')).toBe('invalid_target')
    expect(callback.searchParams.get('state')).toBe(state)
    expect(callback.searchParams.get('iss')).toBe(t.gateway.issuer)
    expect(callback.searchParams.has('code')).toBe(false)
    // The strict client accepts the response's iss and state, then surfaces the error.
    let raised: unknown
    try { oauth.validateAuthResponse(t.as, client, callback, state) } catch (error) { raised = error }
    expect(raised).toBeInstanceOf(oauth.AuthorizationResponseError)
    expect((raised as oauth.AuthorizationResponseError).error).toBe('invalid_target')
  })

  it('the token request may narrow the code\'s resources; the refresh token keeps them all (RFC 8707 §2.2)', async (context) => {
    const t = await start(context)
    const tokens = await exchange(t, await authorize(t, [t.orders, t.billing]), [t.billing])
    expect(audOf(tokens)).toBe(t.billing)
    expect(audOf(await refresh(t, tokens.refresh_token!))).toEqual([t.orders, t.billing])
  })

  it('a token request widening beyond the code\'s resources is 400 invalid_target, and the code stays redeemable', async (context) => {
    const t = await start(context)
    const flow = await authorize(t, [t.orders])
    expect(await refusal(exchange(t, flow, [t.orders, t.billing]))).toEqual([400, 'invalid_target'])
    expect(await refusal(exchange(t, flow, [DEFAULT_AUDIENCE]))).toEqual([400, 'invalid_target'])
    expect(audOf(await exchange(t, flow))).toBe(t.orders)
  })

  it('a code issued for the default audience cannot be turned into a token for another resource at /token', async (context) => {
    const t = await start(context)
    const flow = await authorize(t, [])
    expect(await refusal(exchange(t, flow, [t.orders]))).toEqual([400, 'invalid_target'])
    expect(audOf(await exchange(t, flow, [DEFAULT_AUDIENCE]))).toBe(DEFAULT_AUDIENCE)
  })

  it('the consent page names the resources, and a remembered consent covers only those', async (context) => {
    const t = await start(context)
    const browser = new FormBrowser(t.gateway.url)
    const url = (resources: string[]) => {
      const query = new URLSearchParams({
        response_type: 'code', client_id: CONF.client_id, redirect_uri: R1, state: 's', scope: 'orders:read',
        code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256',
      })
      for (const resource of resources) query.append('resource', resource)
      return `/authorize?${query}`
    }
    const login = await browser.get(url([t.orders]))
    const first = await loginAndConsent(browser, login, ALICE, { remember: true })
    expect(first.location).toContain('code=')
    const again = await browser.get(url([t.orders]))
    expect(again.location).toContain('code=')
    const wider = await browser.get(url([t.orders, t.billing]))
    expect(wider.location).toContain('/consent?interaction=')
    const page = await browser.get(wider.location!)
    expect(page.text).toContain(t.orders)
    expect(page.text).toContain(t.billing)
  })
})

const stores: Array<[string, (context: TestContext) => Record<string, unknown>]> = [
  ['memory', () => ({ type: 'memory' })],
  ['sqlite', (context) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-resource-'))
    context.onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    return { type: 'sqlite', path: path.join(dir, 'portcullis.db') }
  }],
  ['redis', (context) => {
    const prefix = `{portcullis-resource-${randomUUID()}}:`
    context.onTestFinished(() => deleteKeys(REDIS_URL!, prefix))
    return { type: 'redis', url: REDIS_URL, prefix }
  }],
]

for (const [name, store] of stores) {
  describe.skipIf(name === 'redis' && REDIS_URL === undefined)(`refresh tokens keep the grant's resources (${name} store)${name === 'redis' && REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
    it('a refresh may narrow to one resource; the next, without resource, gets the full set again', async (context) => {
      const t = await start(context, { store: store(context) })
      const tokens = await exchange(t, await authorize(t, [t.orders, t.billing]))
      expect(audOf(tokens)).toEqual([t.orders, t.billing])
      const narrowed = await refresh(t, tokens.refresh_token!, [t.orders])
      expect(audOf(narrowed)).toBe(t.orders)
      const full = await refresh(t, narrowed.refresh_token!)
      expect(audOf(full)).toEqual([t.orders, t.billing])
    })

    it('a refresh widening beyond the grant is invalid_target and leaves the refresh token usable, as a refused scope does', async (context) => {
      const t = await start(context, { store: store(context) })
      const tokens = await exchange(t, await authorize(t, [t.orders]))
      expect(await refusal(refresh(t, tokens.refresh_token!, [t.orders, t.billing]))).toEqual([400, 'invalid_target'])
      expect(await refusal(refresh(t, tokens.refresh_token!, [DEFAULT_AUDIENCE]))).toEqual([400, 'invalid_target'])
      expect(await refusal(refresh(t, tokens.refresh_token!, ['https://evil.example/api']))).toEqual([400, 'invalid_target'])
      // Neither consumed nor revoked: the same refresh token still rotates, for the grant's resource.
      const next = await refresh(t, tokens.refresh_token!)
      expect(audOf(next)).toBe(t.orders)
      expect(next.refresh_token).not.toBe(tokens.refresh_token)
    })
  })
}

describe('opaque access tokens', () => {
  it('introspection shows the aud asked for, and the gateway\'s principal carries it to the resource\'s routes', async (context) => {
    const t = await start(context, { access_token: { audience: [DEFAULT_AUDIENCE], format: 'opaque' } })
    const tokens = await exchange(t, await authorize(t, [t.orders, t.billing]), [t.billing])
    expect(tokens.access_token).toMatch(/^pat_/)
    const introspection = await postForm(t.gateway, '/introspect', { token: tokens.access_token },
      { authorization: basic(CONF.client_id, CONF.client_secret) })
    expect(introspection.body).toMatchObject({ active: true, aud: t.billing, client_id: CONF.client_id, sub: 'alice' })
    const principal = await t.gateway.app.authServer!.embedded.lookupOpaque(tokenHash(tokens.access_token))
    expect(principal?.audience).toEqual([t.billing])
    // The gateway binds a resource's routes to tokens for it (RFC 8707): this one is good at billing only.
    expect((await callApi(t.gateway, tokens.access_token, '/billing/invoices')).status).toBe(200)
    expect((await callApi(t.gateway, tokens.access_token, '/api/orders')).status).toBe(401)

    const both = await refresh(t, tokens.refresh_token!)
    const again = await postForm(t.gateway, '/introspect', { token: both.access_token }, { authorization: basic(CONF.client_id, CONF.client_secret) })
    expect(again.body.aud).toEqual([t.orders, t.billing])
  })
})

describe('metadata', () => {
  it('lists the gateway\'s resources as protected_resources (RFC 9728 §4), and no other resource member', async (context) => {
    const t = await start(context)
    expect(t.as.protected_resources).toEqual([t.orders, t.billing])
    const oidc = await (await fetch(`${t.gateway.issuer}/.well-known/openid-configuration`)).json() as Record<string, unknown>
    expect(oidc.protected_resources).toEqual([t.orders, t.billing])
    expect(Object.keys(oidc).filter((key) => /resource/.test(key))).toEqual(['protected_resources'])
  })
})

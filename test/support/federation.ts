/**
 * Federated sign-in for the suites: an embedded server whose login goes to an upstream oidc-provider, and a
 * FormBrowser walk through the whole chain (our /authorize → the provider's login and consent pages → our
 * callback → our consent → the client), one redirect at a time so every hop can be asserted.
 */
import { expect } from 'vitest'
import { closedPort } from './upstream.js'
import { startAuthServerGateway, type RunningGateway, type StartOptions } from './gateway.js'
import { field, type FormBrowser, type PageResponse } from './browser.js'
import { startUpstreamIdp, type UpstreamIdp, type UpstreamIdpOptions } from './upstream-idp.js'
import { R1, TV1 } from './authserver.js'

export const UPSTREAM_CLIENT = { client_id: 'portcullis', client_secret: 'upstream-secret-0123456789abcdef' }

/** The public client of our own server that the suites sign in to. */
export const APP_CLIENT = {
  client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'],
  redirect_uris: [R1], scopes: ['openid', 'profile', 'orders:read'], post_logout_redirect_uris: ['https://app.example.com/signed-out'],
}

export interface FederatedSetup {
  gateway: RunningGateway & { issuer: string }
  upstreams: UpstreamIdp[]
  close(): Promise<void>
}

/**
 * Starts `providers.length` upstream providers and one gateway whose `identity_providers` are `providers`
 * (each given its `issuer` and client here); `extra` goes into `authorization_server`.
 */
export async function startFederated(providers: Array<{ id: string; upstream?: Partial<UpstreamIdpOptions>; config?: Record<string, unknown>; client?: Record<string, unknown> }>,
  extra: Record<string, unknown> = {}, gatewayExtra: Record<string, unknown> = {}, options: StartOptions = {}): Promise<FederatedSetup> {
  const port = options.port ?? await closedPort()
  const upstreams = await Promise.all(providers.map(({ id, upstream, client }) => startUpstreamIdp({
    clients: [{
      ...UPSTREAM_CLIENT, redirect_uris: [`http://127.0.0.1:${port}/callback/${id}`],
      post_logout_redirect_uris: [`http://127.0.0.1:${port}/logout/callback`], grant_types: ['authorization_code', 'refresh_token'],
      ...client,
    }],
    ...upstream,
  })))
  const gateway = await startAuthServerGateway({
    access_token: { audience: ['orders-api'], claims: ['groups', 'email'] },
    clients: [APP_CLIENT],
    identity_providers: providers.map(({ id, config }, index) => ({
      id, issuer: upstreams[index]!.issuer, ...UPSTREAM_CLIENT, scopes: ['openid', 'email', 'profile', 'groups'], ...config,
    })),
    ...extra,
  }, gatewayExtra, { ...options, port })
  return {
    gateway, upstreams,
    close: async () => {
      await gateway.close()
      await Promise.all(upstreams.map((upstream) => upstream.close()))
    },
  }
}

/** An authorization request of APP_CLIENT with PKCE (TV1), state and nonce. */
export function authorizeUrl(params: Record<string, string> = {}): string {
  return `/authorize?${new URLSearchParams({
    response_type: 'code', client_id: APP_CLIENT.client_id, redirect_uri: R1, scope: 'openid orders:read', state: 'client-state',
    nonce: 'client-nonce', code_challenge: TV1.challenge, code_challenge_method: 'S256', ...params,
  })}`
}

/** The action URL of the first form of a page. */
function formAction(page: PageResponse, base: string): string {
  const match = /<form[^>]*action="([^"]+)"/.exec(page.text)
  if (!match) throw new Error(`no form in:\n${page.text.slice(0, 1500)}`)
  return new URL(match[1]!.replace(/&amp;/g, '&'), base).toString()
}

/**
 * Follows redirects from `start` while they stay at the upstream, signing in there as `login` and consenting, and
 * returns the first response that is not the upstream's: our callback's answer. `visited` collects every URL.
 */
export async function throughUpstream(browser: FormBrowser, upstream: UpstreamIdp, start: PageResponse, login: string,
  visited: string[] = []): Promise<PageResponse> {
  let res = start
  for (let hop = 0; hop < 20; hop++) {
    const location = res.location
    if (location === undefined || !location.startsWith(new URL(upstream.issuer).origin)) {
      // A page of ours that is a step before the provider: the login step (straight through, or its chooser).
      return res
    }
    visited.push(location)
    res = await browser.get(location)
    if (res.status === 200 && res.text.includes('name="login"')) {
      res = await browser.post(formAction(res, location), { prompt: 'login', login, password: 'any password' })
    } else if (res.status === 200 && res.text.includes('name="prompt" value="consent"')) {
      res = await browser.post(formAction(res, location), { prompt: 'consent' })
    }
  }
  throw new Error('too many redirects at the upstream')
}

/** Back from the provider: our callback, then our consent (allowed) when it is asked. */
export async function finishAtUs(browser: FormBrowser, back: PageResponse): Promise<PageResponse> {
  let res = back
  if (res.location?.includes('/callback/')) res = await browser.get(res.location)
  if (res.location?.includes('/consent?')) {
    const page = await browser.get(res.location)
    res = await browser.post('/consent', { _csrf: field(page, '_csrf'), interaction: field(page, 'interaction'), decision: 'allow' })
  }
  return res
}

/** From /authorize to the client's redirect: our login step, the provider, our consent. Returns the last response. */
export async function federatedSignIn(browser: FormBrowser, upstream: UpstreamIdp, login: string,
  authorize: string = authorizeUrl(), visited: string[] = []): Promise<PageResponse> {
  let res = await browser.get(authorize)
  if (res.location?.includes('/login?')) res = await browser.get(res.location)
  return finishAtUs(browser, await throughUpstream(browser, upstream, res, login, visited))
}

/** As federatedSignIn, choosing `provider` on the chooser page (its button's link). */
export async function signInVia(browser: FormBrowser, provider: string, upstream: UpstreamIdp, login: string,
  authorize: string = authorizeUrl()): Promise<PageResponse> {
  const start = await browser.get(authorize)
  const interaction = new URL(start.location!).searchParams.get('interaction')!
  const chooser = await browser.get(start.location!)
  expect(chooser.text).toContain(`/login/${provider}?interaction=${encodeURIComponent(interaction)}`)
  const res = await browser.get(`/login/${provider}?interaction=${encodeURIComponent(interaction)}`)
  return finishAtUs(browser, await throughUpstream(browser, upstream, res, login))
}

/** Redeems the code of a successful sign-in for APP_CLIENT's tokens. */
export async function redeem(gateway: RunningGateway, location: string | undefined): Promise<Record<string, unknown>> {
  expect(location?.startsWith(R1)).toBe(true)
  const code = new URL(location!).searchParams.get('code')
  expect(code).toBeTruthy()
  const res = await fetch(`${gateway.url}/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: code!, redirect_uri: R1, client_id: APP_CLIENT.client_id, code_verifier: TV1.verifier }),
  })
  const body = await res.json() as Record<string, unknown>
  expect(res.status, JSON.stringify(body)).toBe(200)
  return body
}

/** The payload of a JWT, unverified (the suites check what our own server put in it). */
export function jwtPayload(token: unknown): Record<string, unknown> {
  return JSON.parse(Buffer.from(String(token).split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>
}

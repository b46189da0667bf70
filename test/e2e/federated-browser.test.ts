/**
 * Federated sign-in end to end, in headless Chromium: oauth4webapi (a strict client) → Portcullis /authorize →
 * node-oidc-provider's own login and consent pages (the upstream) → Portcullis's callback → Portcullis's consent →
 * the code, redeemed and checked by oauth4webapi → a route that requires the upstream's group, through the gateway.
 * Nobody here wrote the client or the provider; the browser follows every redirect and sets every cookie itself.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import * as oauth from 'oauth4webapi'
import type { Page } from 'playwright-core'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { chromiumSkipReason, useChromium } from '../support/chromium.js'
import { closedPort } from '../support/upstream.js'
import { startUpstreamIdp, type UpstreamIdp } from '../support/upstream-idp.js'
import { UPSTREAM_CLIENT } from '../support/federation.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
const CLI = { client_id: 'orders-cli', name: 'Orders CLI' }
const ACCOUNTS = {
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice', groups: ['staff', 'orders-admins'] },
  bob: { email: 'bob@example.com', email_verified: true, name: 'Bob', groups: ['staff'] },
}

const skip = chromiumSkipReason !== undefined
if (skip) console.log(`test/e2e/federated-browser.test.ts skipped: ${chromiumSkipReason}`)

describe.skipIf(skip)(`federated sign-in in headless Chromium${skip ? ` (skipped: ${chromiumSkipReason})` : ''}`, () => {
  const newContext = useChromium()
  let gateway: RunningGateway & { issuer: string }
  let upstream: UpstreamIdp
  let callback: { redirectUri: string; close(): Promise<void> }
  let as: oauth.AuthorizationServer
  const cli: oauth.Client = { client_id: CLI.client_id }

  beforeAll(async () => {
    const server = http.createServer((_request, response) => response.writeHead(200, { 'content-type': 'text/plain' }).end('done'))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    callback = {
      redirectUri: `http://127.0.0.1:${(server.address() as AddressInfo).port}/callback`,
      close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
    }
    const port = await closedPort()
    upstream = await startUpstreamIdp({
      clients: [{ ...UPSTREAM_CLIENT, redirect_uris: [`http://127.0.0.1:${port}/callback/corp`], grant_types: ['authorization_code'] }],
      accounts: ACCOUNTS,
    })
    gateway = await startAuthServerGateway({
      access_token: { audience: ['orders-api'], claims: ['groups'] },
      clients: [{ ...CLI, token_endpoint_auth_method: 'none', grant_types: ['authorization_code'],
        redirect_uris: ['http://127.0.0.1/callback'], scopes: ['openid', 'orders:read'] }],
      identity_providers: [{ id: 'corp', name: 'Corp SSO', issuer: upstream.issuer, ...UPSTREAM_CLIENT, scopes: ['openid', 'email', 'profile', 'groups'] }],
    }, {
      routes: [
        // Only the upstream's orders-admins group may reach the admin API.
        { id: 'admin', path: '/api/admin/**', upstream: 'echo', auth: 'required', claims: { all: [{ claim: 'groups', contains: 'orders-admins' }] } },
        { id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' },
      ],
    }, { port })
    const issuer = new URL(gateway.issuer)
    as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure }))
  })
  afterAll(() => Promise.all([gateway?.close(), upstream?.close(), callback?.close()]))

  async function newPage(test: TestContext): Promise<Page> {
    const context = await newContext(test)
    // The provider's page imports a web font; nothing leaves 127.0.0.1.
    await context.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort())
    return context.newPage()
  }

  /** Signs `login` in at the provider through the browser and returns the access token oauth4webapi got. */
  async function signIn(page: Page, login: string): Promise<string> {
    const verifier = oauth.generateRandomCodeVerifier()
    const state = oauth.generateRandomState()
    const nonce = oauth.generateRandomNonce()
    const url = new URL(as.authorization_endpoint!)
    url.search = new URLSearchParams({
      response_type: 'code', client_id: CLI.client_id, redirect_uri: callback.redirectUri, scope: 'openid orders:read',
      state, nonce, code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
    }).toString()
    await page.goto(url.href)
    // One provider and no local users: straight to the provider's own login page.
    await page.waitForURL((at) => at.origin === new URL(upstream.issuer).origin)
    await page.locator('input[name=login]').fill(login)
    await page.locator('input[name=password]').fill('whatever the provider wants')
    await page.locator('button[type=submit]').click()
    await page.getByRole('button', { name: 'Continue' }).click()
    // Back at Portcullis: our own consent page.
    await page.getByRole('heading', { level: 1 }).filter({ hasText: /Allow|Authorize|access/i }).waitFor({ timeout: 5000 })
    expect(new URL(page.url()).origin).toBe(gateway.url)
    await page.getByRole('button', { name: 'Allow' }).click()
    await page.waitForURL((at) => at.href.startsWith(`${callback.redirectUri}?`))
    const params = oauth.validateAuthResponse(as, cli, new URL(page.url()), state)
    const response = await oauth.authorizationCodeGrantRequest(as, cli, oauth.None(), params, callback.redirectUri, verifier, insecure)
    const tokens = await oauth.processAuthorizationCodeResponse(as, cli, response, { expectedNonce: nonce, requireIdToken: true })
    expect(oauth.getValidatedIdTokenClaims(tokens)).toMatchObject({ iss: gateway.issuer, sub: `corp:${login}` })
    return tokens.access_token
  }

  it('alice, in the upstream group orders-admins, reaches the admin route; the echo names her federated subject', async (test) => {
    const token = await signIn(await newPage(test), 'alice')
    const res = await fetch(`${gateway.url}/api/admin/reports`, { headers: { authorization: `Bearer ${token}` } })
    expect(res.status).toBe(200)
    const echo = await res.json() as { headers: Record<string, string> }
    expect(echo.headers['x-auth-subject']).toBe('corp:alice')
  })

  it('bob, without the group, signs in and reaches /api but is refused the admin route (403)', async (test) => {
    const token = await signIn(await newPage(test), 'bob')
    expect((await fetch(`${gateway.url}/api/orders`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
    const admin = await fetch(`${gateway.url}/api/admin/reports`, { headers: { authorization: `Bearer ${token}` } })
    // A claim condition unmet: 403 access_denied, without a challenge (the token is fine; its holder is not allowed).
    expect(admin.status).toBe(403)
    expect(await admin.json()).toMatchObject({ error: 'access_denied' })
  })
})

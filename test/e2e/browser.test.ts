/**
 * End to end in real headless Chromium (playwright-core driving Debian's /usr/bin/chromium): the login,
 * consent and device pages of the embedded server as a person meets them, with oauth4webapi, a strict
 * client, on the other side — discovery, PKCE, state, nonce, iss, ID token, device polling — and every
 * token spent on a call through the gateway to its echo upstream. Also: the pages work without
 * JavaScript and from the keyboard, and refuse to be framed. test/support/browser.ts covers the same
 * pages over fetch, faster; this suite is the proof that a browser agrees.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import * as oauth from 'oauth4webapi'
import type { Page } from 'playwright-core'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, callApi } from '../support/authserver.js'
import { chromiumSkipReason, useChromium } from '../support/chromium.js'

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const insecure = { [oauth.allowInsecureRequests]: true } as const
const CLI = { client_id: 'orders-cli', name: 'Orders CLI' }
const TV = { client_id: 'living-room-tv', name: 'Living-room TV' }
const CODE_SCOPE = 'openid profile orders:read'
/** RFC 8628 §3.5 polls take at least `interval` (5 s) each: a device test waits one or two of them. */
const DEVICE_TIMEOUT = { timeout: 40_000 }

const setup = {
  access_token: { audience: ['orders-api'] },
  clients: [
    // RFC 8252 §7.3: a loopback IP literal registered without a port matches any port.
    { ...CLI, token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'],
      redirect_uris: ['http://127.0.0.1/callback'], scopes: ['openid', 'profile', 'orders:read'] },
    { ...TV, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT, 'refresh_token'], scopes: ['orders:read'] },
  ],
  users: [{ ...ALICE, claims: { name: 'Alice' } }],
}

/** What builtin:echo answers (src/forward/echo.ts). */
interface Echo { method: string; path: string; headers: Record<string, string | string[]> }

/** The page's globals that page.evaluate reads, typed by hand: the project compiles without the DOM lib. */
interface PageGlobals {
  document: { body: unknown; activeElement: { tagName: string; id: string; textContent: string | null } | null }
}

/** The native app's redirect target: a real server on 127.0.0.1:0 that answers 200 "done". */
interface CallbackServer { redirectUri: string; received: string[]; close(): Promise<void> }

async function startCallbackServer(): Promise<CallbackServer> {
  const received: string[] = []
  const server = http.createServer((request, response) => {
    received.push(request.url ?? '')
    response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end('done')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    redirectUri: `http://127.0.0.1:${port}/callback`,
    received,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    }),
  }
}

const skip = chromiumSkipReason !== undefined
// The default reporter lists no test of a skipped file: say why once, beside the count of skipped tests.
if (skip) console.log(`test/e2e/browser.test.ts skipped: ${chromiumSkipReason}`)

describe.skipIf(skip)(`in headless Chromium${skip ? ` (skipped: ${chromiumSkipReason})` : ''}`, () => {
  const newContext = useChromium()
  let gateway: RunningGateway & { issuer: string }
  let callback: CallbackServer
  let as: oauth.AuthorizationServer
  const cli: oauth.Client = { client_id: CLI.client_id }
  const tv: oauth.Client = { client_id: TV.client_id }

  beforeAll(async () => {
    [gateway, callback] = await Promise.all([startAuthServerGateway(setup), startCallbackServer()])
    const issuer = new URL(gateway.issuer)
    as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure }))
  })
  afterAll(() => Promise.all([gateway?.close(), callback?.close()]))

  async function newPage(test: TestContext, options: { javaScriptEnabled?: boolean } = {}): Promise<Page> {
    return (await newContext(test, options)).newPage()
  }

  interface CodeRequest { url: string; state: string; nonce: string; verifier: string }

  /** A fresh authorization request, as the strict client builds it: PKCE S256, state and nonce. */
  async function codeRequest(): Promise<CodeRequest> {
    const verifier = oauth.generateRandomCodeVerifier()
    const state = oauth.generateRandomState()
    const nonce = oauth.generateRandomNonce()
    const url = new URL(as.authorization_endpoint!)
    url.search = new URLSearchParams({
      response_type: 'code', client_id: CLI.client_id, redirect_uri: callback.redirectUri, scope: CODE_SCOPE,
      state, nonce, code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
    }).toString()
    return { url: url.href, state, nonce, verifier }
  }

  /** The client's side of the callback: iss and state checked, the code redeemed, the ID token checked. */
  async function redeem(request: CodeRequest, callbackUrl: string): Promise<oauth.TokenEndpointResponse> {
    const params = oauth.validateAuthResponse(as, cli, new URL(callbackUrl), request.state)
    const response = await oauth.authorizationCodeGrantRequest(as, cli, oauth.None(), params, callback.redirectUri,
      request.verifier, insecure)
    return oauth.processAuthorizationCodeResponse(as, cli, response, { expectedNonce: request.nonce, requireIdToken: true })
  }

  async function signIn(page: Page): Promise<void> {
    await page.getByLabel('Username').fill(ALICE.username)
    await page.getByLabel('Password').fill(ALICE.password)
    await page.getByRole('button', { name: 'Sign in' }).click()
  }

  /** Resolves once the browser has landed on the client's redirect URI; returns that URL. */
  async function landedOnCallback(page: Page): Promise<string> {
    await page.waitForURL((url) => url.href.startsWith(`${callback.redirectUri}?`))
    expect(await page.locator('body').textContent()).toBe('done')
    expect(callback.received).toContain(page.url().slice(new URL(callback.redirectUri).origin.length))
    return page.url()
  }

  /** Waits for the page a click led to, known by its h1: the old page's heading must not be read instead. */
  async function pageTitled(page: Page, title: string): Promise<void> {
    await page.getByRole('heading', { level: 1, name: title, exact: true }).waitFor({ timeout: 5000 })
  }

  /** Calls /api/orders through the gateway; the echo shows what the upstream was told. */
  async function callThroughGateway(token: string): Promise<Echo> {
    const res = await callApi(gateway, token)
    expect(res.status).toBe(200)
    return await res.json() as Echo
  }

  function expectIdentity(echo: Echo, clientId: string): void {
    expect(echo.method).toBe('GET')
    expect(echo.headers).toMatchObject({ 'x-auth-subject': 'alice', 'x-auth-client-id': clientId, 'x-auth-issuer': gateway.issuer })
    expect(String(echo.headers['x-auth-scopes']).split(' ')).toContain('orders:read')
  }

  describe('authorization code with PKCE, oauth4webapi as the client', () => {
    it('logs alice in, shows the consent page, redirects with code, state and iss, and the tokens work through the gateway and refresh', async (test) => {
      expect(as.issuer).toBe(gateway.issuer)
      const request = await codeRequest()
      const page = await newPage(test)
      await page.goto(request.url)
      expect(page.url()).toContain('/login?interaction=')
      expect(await page.getByText(`Sign in to continue to ${CLI.name}.`).count()).toBe(1)
      await signIn(page)

      await page.waitForURL(/\/consent\?interaction=/)
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe(`Allow access to ${CLI.name}?`)
      expect(await page.locator('main').getByText('Signed in as').textContent()).toBe('Signed in as alice.')
      expect(await page.locator('main li').allTextContents()).toEqual([
        'Confirm who you are (openid)', 'Read your profile (name, username, picture) (profile)', 'orders:read',
      ])
      const remember = page.getByLabel('Remember this decision')
      expect(await remember.isChecked()).toBe(false)
      expect(await page.getByRole('button', { name: 'Deny' }).isVisible()).toBe(true)
      await page.getByRole('button', { name: 'Allow' }).click()

      const callbackUrl = await landedOnCallback(page)
      const params = new URL(callbackUrl).searchParams
      expect(params.get('state')).toBe(request.state)
      expect(params.get('iss')).toBe(gateway.issuer)
      const tokens = await redeem(request, callbackUrl)
      expect(tokens.token_type).toBe('bearer')
      expect(tokens.scope?.split(' ').sort()).toEqual(['openid', 'orders:read', 'profile'])
      expect(oauth.getValidatedIdTokenClaims(tokens)).toMatchObject({
        iss: gateway.issuer, sub: 'alice', aud: CLI.client_id, nonce: request.nonce,
      })
      expectIdentity(await callThroughGateway(tokens.access_token), CLI.client_id)

      const refreshed = await oauth.processRefreshTokenResponse(as, cli,
        await oauth.refreshTokenGrantRequest(as, cli, oauth.None(), tokens.refresh_token!, insecure))
      expect(refreshed.access_token).not.toBe(tokens.access_token)
      expectIdentity(await callThroughGateway(refreshed.access_token), CLI.client_id)
    })
  })

  // Concurrent: each test spends most of its time waiting out the polling interval.
  describe.concurrent('device flow, oauth4webapi as the device', () => {
    async function authorizeDevice(): Promise<oauth.DeviceAuthorizationResponse> {
      return oauth.processDeviceAuthorizationResponse(as, tv,
        await oauth.deviceAuthorizationRequest(as, tv, oauth.None(), { scope: 'orders:read' }, insecure))
    }

    async function poll(deviceCode: string): Promise<oauth.TokenEndpointResponse> {
      return oauth.processDeviceCodeResponse(as, tv, await oauth.deviceCodeGrantRequest(as, tv, oauth.None(), deviceCode, insecure))
    }

    function expectPending(result: Promise<unknown>) {
      return expect(result).rejects.toMatchObject({ error: 'authorization_pending' })
    }

    /**
     * RFC 8628 §3.4, §3.5: waits `interval` before every request and tries again while authorization is
     * pending. slow_down is an error here: a client that honours the interval never earns one.
     */
    async function pollForTokens(device: oauth.DeviceAuthorizationResponse, signal: AbortSignal): Promise<oauth.TokenEndpointResponse> {
      for (;;) {
        await sleep((device.interval ?? 5) * 1000, undefined, { signal })
        try {
          return await poll(device.device_code)
        } catch (error) {
          if (!(error instanceof oauth.ResponseBodyError && error.error === 'authorization_pending')) throw error
        }
      }
    }

    it('DV-02 alice opens verification_uri, logs in, types the code in lower case without the dash, approves; the polling device gets a token that works', DEVICE_TIMEOUT, async (test) => {
      const device = await authorizeDevice()
      expect(device.verification_uri).toBe(`${gateway.issuer}/device`)
      expect(device.interval).toBe(5)
      await expectPending(poll(device.device_code))
      const stop = new AbortController()
      test.onTestFinished(() => stop.abort())

      const page = await newPage(test)
      const approve = async () => {
        await page.goto(device.verification_uri)
        expect(await page.getByText('Sign in to connect a device.').count()).toBe(1)
        await signIn(page)
        await page.getByLabel('Code').fill(device.user_code.replace('-', '').toLowerCase())
        await page.getByRole('button', { name: 'Continue' }).click()
        await pageTitled(page, `Connect ${TV.name}?`)
        expect(await page.locator('main strong.code').textContent()).toBe(device.user_code)
        expect(await page.locator('main li').allTextContents()).toEqual(['orders:read'])
        await page.getByRole('button', { name: 'Approve' }).click()
        await pageTitled(page, 'Device connected')
      }
      const [tokens] = await Promise.all([pollForTokens(device, stop.signal), approve()])
      expect(tokens.token_type).toBe('bearer')
      expect(tokens.refresh_token).toBeDefined()
      expectIdentity(await callThroughGateway(tokens.access_token), TV.client_id)
    })

    it('DV-01 verification_uri_complete pre-fills the code, yet nothing is approved until alice clicks Approve', DEVICE_TIMEOUT, async (test) => {
      const device = await authorizeDevice()
      expect(device.verification_uri_complete).toBeDefined()
      const page = await newPage(test)
      await page.goto(device.verification_uri_complete!)
      await signIn(page)
      await page.waitForURL((url) => url.pathname === '/device' && url.searchParams.get('user_code') === device.user_code)
      expect(await page.getByLabel('Code').inputValue()).toBe(device.user_code)
      await page.getByRole('button', { name: 'Continue' }).click()
      await pageTitled(page, `Connect ${TV.name}?`)

      // Logged in, code pre-filled and confirmed: still only the user's click approves (RFC 8628 §5.4).
      await expectPending(poll(device.device_code))
      await page.getByRole('button', { name: 'Approve' }).click()
      await pageTitled(page, 'Device connected')
      await sleep(device.interval! * 1000)
      const tokens = await poll(device.device_code)
      expectIdentity(await callThroughGateway(tokens.access_token), TV.client_id)
    })
  })

  describe('without JavaScript, and from the keyboard', () => {
    it('completes the whole code flow with JavaScript disabled: the pages need no script', async (test) => {
      const page = await newPage(test, { javaScriptEnabled: false })
      const request = await codeRequest()
      await page.goto(request.url)
      expect(await page.locator('script').count()).toBe(0)
      await signIn(page)
      await page.waitForURL(/\/consent\?interaction=/)
      expect(await page.locator('script').count()).toBe(0)
      await page.getByRole('button', { name: 'Allow' }).click()
      const tokens = await redeem(request, await landedOnCallback(page))
      expectIdentity(await callThroughGateway(tokens.access_token), CLI.client_id)
    })

    it('focuses Username first; Tab goes to Password, then Sign in; Enter submits, and Enter allows on the consent page', async (test) => {
      const page = await newPage(test)
      const request = await codeRequest()
      await page.goto(request.url)
      const focused = () => page.evaluate(() => {
        const element = (globalThis as unknown as PageGlobals).document.activeElement
        return { tag: element?.tagName ?? '', id: element?.id ?? '', text: element?.textContent?.trim() ?? '' }
      })
      // autofocus applies at the next rendering update, which may come just after the load event.
      const somethingFocused = () => page.waitForFunction(() => {
        const { document } = globalThis as unknown as PageGlobals
        return document.activeElement !== null && document.activeElement !== document.body
      }, undefined, { timeout: 2000 })
      await somethingFocused()
      expect(await focused()).toEqual({ tag: 'INPUT', id: 'username', text: '' })
      await page.keyboard.type(ALICE.username)
      await page.keyboard.press('Tab')
      expect(await focused()).toEqual({ tag: 'INPUT', id: 'password', text: '' })
      await page.keyboard.type(ALICE.password)
      await page.keyboard.press('Tab')
      expect(await focused()).toEqual({ tag: 'BUTTON', id: '', text: 'Sign in' })
      await page.keyboard.press('Enter')

      await page.waitForURL(/\/consent\?interaction=/)
      await somethingFocused()
      expect(await focused()).toMatchObject({ tag: 'BUTTON', text: 'Allow' })
      await page.keyboard.press('Enter')
      const tokens = await redeem(request, await landedOnCallback(page))
      expect(tokens.access_token).toBeTruthy()
    })
  })

  describe('clickjacking', () => {
    it('A-14 the login page comes with X-Frame-Options DENY and CSP frame-ancestors \'none\', and Chromium will not frame it', async (test) => {
      const page = await newPage(test)
      const response = await page.goto((await codeRequest()).url)
      expect(response?.url()).toContain('/login?interaction=')
      expect(response?.status()).toBe(200)
      const headers = response!.headers()
      expect(headers['x-frame-options']).toBe('DENY')
      expect(headers['content-security-policy']).toContain('frame-ancestors \'none\'')

      // And Chromium obeys them: another origin (the callback server's) that frames the page gets an error page.
      await page.goto(callback.redirectUri)
      await page.setContent(`<iframe src="${response!.url()}" title="login"></iframe>`)
      const frame = await (await page.locator('iframe').elementHandle())!.contentFrame()
      await expect.poll(() => frame!.url()).toBe('chrome-error://chromewebdata/')
      expect(await frame!.locator('#username').count()).toBe(0)
    })
  })
})

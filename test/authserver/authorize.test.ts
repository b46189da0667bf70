/**
 * /authorize, the login page and the consent page (checklist §2 A-01..A-16, IM-01, §14.1, §14.5, §14.6)
 * against the real gateway and embedded server on loopback, driven by test/support/browser.ts: cookies,
 * CSRF fields and redirects as a browser has them. Codes are redeemed at /token like any client would.
 */
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { codeId, findAuthorizationCode } from '../../src/authserver/authorization-codes.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, TV1, callApi, postForm } from '../support/authserver.js'
import { FormBrowser, expectPageHeaders, field, loginAndConsent, responseParams, type PageResponse } from '../support/browser.js'
import { testClock } from '../support/clock.js'

type Gateway = RunningGateway & { issuer: string }

const R2 = 'https://app.example.com/cb2'
const WITH_QUERY = 'https://app.example.com/cb?tenant=a%20b&x=1'
const { verifier: VERIFIER, challenge: CHALLENGE } = TV1
const CONF = { client_id: 'conf-basic', client_secret: 'conf-basic-secret-0123456789' }
const BOB = { username: 'bob', password: 'bob-password-0123' }

function setup(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const code = ['authorization_code', 'refresh_token']
  const scopes = ['openid', 'profile', 'orders:read', 'orders:write']
  return {
    access_token: { audience: ['orders-api'] },
    clients: [
      { ...CONF, name: 'Orders <Web>', grant_types: code, redirect_uris: [R1], scopes },
      { client_id: 'multi', client_secret: 'multi-secret-0123456789ab', grant_types: code, redirect_uris: [R1, R2], scopes },
      { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: code, redirect_uris: [R1, WITH_QUERY], scopes },
      { client_id: 'native', token_endpoint_auth_method: 'none', grant_types: code, redirect_uris: ['http://127.0.0.1/cb', 'http://[::1]/cb'], scopes },
      { client_id: 'stateless', token_endpoint_auth_method: 'none', grant_types: code, redirect_uris: [R1], scopes, require_state: false },
      { client_id: 'no-pkce', client_secret: 'no-pkce-secret-0123456789', grant_types: code, redirect_uris: [R1], scopes, require_pkce: false },
      { client_id: 'machine', client_secret: 'machine-secret-0123456789', grant_types: ['client_credentials'], scopes: ['orders:read'] },
    ],
    users: [{ ...ALICE, claims: { name: 'Alice' } }, BOB],
    throttling: { failures_per_client: 3 },
    ...extra,
  }
}

async function start(context: TestContext, extra: Record<string, unknown> = {}, options: { now?: () => number } = {}): Promise<Gateway> {
  const gateway = await startAuthServerGateway(setup(extra), {}, options)
  context.onTestFinished(() => gateway.close())
  return gateway
}

/** A valid request for `spa` unless overridden; `undefined` removes a parameter. */
function authorizeUrl(params: Record<string, string | undefined> = {}): string {
  const all: Record<string, string | undefined> = {
    response_type: 'code', client_id: 'spa', redirect_uri: R1, scope: 'orders:read', state: 'st-123',
    code_challenge: CHALLENGE, code_challenge_method: 'S256', ...params,
  }
  const query = new URLSearchParams()
  for (const [name, value] of Object.entries(all)) if (value !== undefined) query.set(name, value)
  return `/authorize?${query}`
}

/** An error page: 400 HTML, the A-14 headers, and above all no Location. */
function expectErrorPage(res: PageResponse): void {
  expect(res.status).toBe(400)
  expect(res.headers.get('location')).toBeNull()
  expect(res.headers.get('content-type')).toMatch(/^text\/html/)
  expectPageHeaders(res)
}

/** A redirect back to R1 carrying `error`, with our iss. */
function expectErrorRedirect(gateway: Gateway, res: PageResponse, error: string, options: { fragment?: boolean; status?: number } = {}) {
  expect(res.status).toBe(options.status ?? 302)
  expect(res.location?.startsWith(R1)).toBe(true)
  const params = responseParams(res.location, options.fragment)
  expect(params.get('error')).toBe(error)
  expect(params.get('iss')).toBe(gateway.issuer)
  expect(params.has('code')).toBe(false)
  return params
}

/** Logs alice in (and consents) for a request; returns the redirect to the client. */
async function authorizeAsAlice(browser: FormBrowser, url = authorizeUrl(), consent: Parameters<typeof loginAndConsent>[3] = {}) {
  return loginAndConsent(browser, await browser.get(url), ALICE, consent)
}

function redeem(gateway: Gateway, code: string, extra: Record<string, string> = {}) {
  return postForm(gateway, '/token', {
    grant_type: 'authorization_code', client_id: 'spa', code, redirect_uri: R1, code_verifier: VERIFIER, ...extra,
  })
}

describe('/authorize before the redirect URI is trusted: pages, never redirects', () => {
  let gateway: Gateway
  beforeAll(async () => { gateway = await startAuthServerGateway(setup()) })
  afterAll(() => gateway.close())

  it('A-02 a missing client_id gets an HTML error page with no Location', async () => {
    expectErrorPage(await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: undefined })))
  })

  it('A-02 an unknown client_id gets the error page, never a redirect to the redirect_uri it sent', async () => {
    const res = await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'nobody', redirect_uri: 'https://evil.test/cb' }))
    expectErrorPage(res)
    expect(res.text).not.toContain('evil.test')
  })

  it('A-02 a client registered for client_credentials only has no redirect URI: error page', async () => {
    expectErrorPage(await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'machine', redirect_uri: R1 })))
  })

  const bypasses = [
    'https://app.example.com/callback/', 'https://APP.example.com/callback', 'https://app.example.com/CALLBACK',
    'https://app.example.com/callback?x=1', 'https://app.example.com/callback#f', 'https://app.example.com:443/callback',
    'https://app.example.com/%63allback', 'https://app.example.com/x/../callback', 'https://app.example.com/callback/..;/x',
    'https://app.example.com.evil.test/callback', 'https://evil.test@app.example.com/callback', 'http://app.example.com/callback',
  ]
  for (const uri of bypasses) {
    it(`A-03 redirect_uri ${uri} is not R1: error page, no redirect`, async () => {
      expectErrorPage(await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'conf-basic', redirect_uri: uri })))
    })
  }

  it('A-03 the same bypass strings are refused on POST too (A-01)', async () => {
    for (const uri of bypasses.slice(0, 4)) {
      const query = new URL(authorizeUrl({ client_id: 'conf-basic', redirect_uri: uri }), gateway.url).searchParams
      expectErrorPage(await new FormBrowser(gateway.url).post('/authorize', Object.fromEntries(query)))
    }
  })

  it('A-04 a registered loopback IP literal accepts any port, for 127.0.0.1 and [::1]', async () => {
    for (const uri of ['http://127.0.0.1:51004/cb', 'http://[::1]:61023/cb', 'http://127.0.0.1/cb']) {
      const res = await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'native', redirect_uri: uri }))
      expect(res.status, uri).toBe(302)
      expect(res.location, uri).toContain('/login?interaction=')
    }
  })

  it('A-04 the loopback exception takes real ports only: 0, over 65535, leading zeros and an empty port fail (issue 16)', async () => {
    for (const uri of ['http://127.0.0.1:99999/cb', 'http://127.0.0.1:0/cb', 'http://127.0.0.1:05555/cb', 'http://[::1]:65536/cb',
      'http://127.0.0.1:/cb', 'http://[::1]:00080/cb']) {
      expectErrorPage(await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'native', redirect_uri: uri })))
    }
    const edge = await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1:65535/cb' }))
    expect(edge.status).toBe(302)
  })

  it('A-04 the loopback exception covers the port only: path, query, userinfo and localhost still fail (CVE-2020-15233)', async () => {
    for (const uri of ['http://127.0.0.1:5000/cb?bar=foo', 'http://127.0.0.1:5000/cb/', 'http://localhost:5000/cb', 'http://localhost/cb',
      'http://127.0.0.1:5000@evil.test/cb', 'http://127.0.0.1.evil.test/cb', 'https://127.0.0.1:5000/cb', 'http://127.0.0.2:5000/cb']) {
      expectErrorPage(await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'native', redirect_uri: uri })))
    }
  })

  it('A-05 with several registered URIs an omitted redirect_uri gets the error page', async () => {
    expectErrorPage(await new FormBrowser(gateway.url).get(authorizeUrl({ client_id: 'multi', redirect_uri: undefined })))
  })

  it('A-02 a repeated client_id or redirect_uri gets the error page', async () => {
    const browser = new FormBrowser(gateway.url)
    expectErrorPage(await browser.get(`${authorizeUrl()}&client_id=spa`))
    expectErrorPage(await browser.get(`${authorizeUrl()}&redirect_uri=${encodeURIComponent(R1)}`))
  })

  it('A-01 a POST that is not a form gets the error page', async () => {
    const res = await new FormBrowser(gateway.url).request('/authorize', {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ client_id: 'spa' }),
    })
    expectErrorPage(res)
  })
})

describe('/authorize errors after the redirect URI is trusted go back to the client (A-07, A-08, IM-01)', () => {
  let gateway: Gateway
  beforeAll(async () => { gateway = await startAuthServerGateway(setup()) })
  afterAll(() => gateway.close())
  const get = (params: Record<string, string | undefined>) => new FormBrowser(gateway.url).get(authorizeUrl(params))

  const cases: Array<[string, Record<string, string | undefined>, string]> = [
    ['a missing response_type', { response_type: undefined }, 'invalid_request'],
    ['response_type=none', { response_type: 'none' }, 'unsupported_response_type'],
    ['an unknown scope', { scope: 'orders:read admin' }, 'invalid_scope'],
    ['a malformed scope', { scope: 'orders:read  profile' }, 'invalid_scope'],
    ['a public client without code_challenge', { code_challenge: undefined, code_challenge_method: undefined }, 'invalid_request'],
    ['code_challenge_method=plain', { code_challenge_method: 'plain' }, 'invalid_request'],
    ['an unknown code_challenge_method', { code_challenge_method: 'S512' }, 'invalid_request'],
    ['a code_challenge without a method (plain by default)', { code_challenge_method: undefined }, 'invalid_request'],
    ['a code_challenge outside 43*128unreserved', { code_challenge: 'short' }, 'invalid_request'],
    ['a code_challenge with a forbidden character', { code_challenge: `${CHALLENGE.slice(0, 42)}+` }, 'invalid_request'],
    ['a request object', { request: 'eyJhbGciOiJub25lIn0.e30.' }, 'request_not_supported'],
    ['a request_uri', { request_uri: 'https://app.example.com/req' }, 'request_uri_not_supported'],
    ['response_mode=form_post', { response_mode: 'form_post' }, 'invalid_request'],
    ['an unknown prompt', { prompt: 'select_account' }, 'invalid_request'],
    ['prompt=none with login', { prompt: 'none login' }, 'invalid_request'],
    ['a max_age that is not a number', { max_age: '-1' }, 'invalid_request'],
  ]
  for (const [what, params, error] of cases) {
    it(`A-08 ${what} → ${error}, with state and iss`, async () => {
      const query = expectErrorRedirect(gateway, await get(params), error)
      expect(query.get('state')).toBe('st-123')
      expect(query.get('error_description')).toBeTruthy()
    })
  }

  it('A-08 a request without state → invalid_request, and the redirect has no state', async () => {
    const query = expectErrorRedirect(gateway, await get({ state: undefined }), 'invalid_request')
    expect(query.has('state')).toBe(false)
  })

  it('A-08 a client that opted out of state (require_state: false) may omit it', async () => {
    const res = await get({ client_id: 'stateless', state: undefined })
    expect(res.status).toBe(302)
    expect(res.location).toContain('/login?interaction=')
  })

  it('A-08 a repeated parameter → invalid_request', async () => {
    const res = await new FormBrowser(gateway.url).get(`${authorizeUrl()}&scope=profile`)
    expectErrorRedirect(gateway, res, 'invalid_request')
  })

  for (const type of ['token', 'code token', 'id_token token', 'code id_token']) {
    it(`IM-01 response_type=${type} → unsupported_response_type in the fragment, with state and iss, no token`, async () => {
      const res = await get({ response_type: type })
      const fragment = expectErrorRedirect(gateway, res, 'unsupported_response_type', { fragment: true })
      expect(fragment.get('state')).toBe('st-123')
      expect(new URL(res.location!).search).toBe('')
      expect(res.location).not.toMatch(/access_token|id_token=/)
    })
  }

  it('A-07 an error on a POST /authorize is a 303 (never 307)', async () => {
    const query = new URL(authorizeUrl({ scope: 'admin' }), gateway.url).searchParams
    expectErrorRedirect(gateway, await new FormBrowser(gateway.url).post('/authorize', Object.fromEntries(query)), 'invalid_scope', { status: 303 })
  })

  it('A-07 the error redirect carries the A-14 headers', async () => {
    expectPageHeaders(await get({ scope: 'admin' }))
  })

  it('A-08 prompt=none without a session → login_required; never a page', async () => {
    expectErrorRedirect(gateway, await get({ prompt: 'none' }), 'login_required')
  })

  it('A-08 prompt=none with a session but no remembered consent → consent_required', async () => {
    const browser = new FormBrowser(gateway.url)
    await authorizeAsAlice(browser)  // logs in, consents once without remembering
    expectErrorRedirect(gateway, await browser.get(authorizeUrl({ prompt: 'none' })), 'consent_required')
  })

  it('A-10 metadata says authorization_response_iss_parameter_supported', async () => {
    const res = await fetch(`${gateway.url}/.well-known/oauth-authorization-server`)
    const metadata = await res.json() as Record<string, unknown>
    expect(metadata).toMatchObject({
      authorization_endpoint: `${gateway.issuer}/authorize`, authorization_response_iss_parameter_supported: true,
      response_types_supported: ['code'], code_challenge_methods_supported: ['S256'],
    })
    expect(metadata.grant_types_supported).toContain('authorization_code')
    expect(metadata.grant_types_supported).not.toContain('implicit')
  })
})

describe('login, consent and the code (A-09..A-16)', () => {
  let gateway: Gateway
  beforeAll(async () => { gateway = await startAuthServerGateway(setup()) })
  afterAll(() => gateway.close())

  it('A-09 log in, allow: 303 to R1 with code, state and iss; the code redeems at /token and the token passes the gateway', async () => {
    const browser = new FormBrowser(gateway.url)
    const first = await browser.get(authorizeUrl())
    expect(first.status).toBe(302)
    const login = await browser.get(first.location!)
    expect(login.status).toBe(200)
    expect(login.text).toContain('<label for="username">')
    const done = await loginAndConsent(browser, login, ALICE)
    expect(done.status).toBe(303)
    expect(done.location!.startsWith(`${R1}?`)).toBe(true)
    const params = responseParams(done.location)
    expect(params.get('state')).toBe('st-123')
    expect(params.get('iss')).toBe(gateway.issuer)
    // the front channel carries a code and nothing token-like.
    expect([...params.keys()].sort()).toEqual(['code', 'iss', 'state'])
    const tokens = await redeem(gateway, params.get('code')!)
    expect(tokens.status).toBe(200)
    expect(tokens.body.scope).toBe('orders:read')
    expect((await callApi(gateway, tokens.body.access_token as string)).status).toBe(200)
  })

  it('TV-12 state survives the round trip byte for byte, on success and on error', async () => {
    const state = 'a b+c%2F&=é~'
    const ok = await authorizeAsAlice(new FormBrowser(gateway.url), authorizeUrl({ state }))
    expect(responseParams(ok.location).get('state')).toBe(state)
    const refused = await new FormBrowser(gateway.url).get(authorizeUrl({ state, scope: 'admin' }))
    expect(responseParams(refused.location).get('state')).toBe(state)
  })

  it('A-09 a query already in the registered redirect URI is kept as registered', async () => {
    const done = await authorizeAsAlice(new FormBrowser(gateway.url), authorizeUrl({ redirect_uri: WITH_QUERY }))
    expect(done.location!.startsWith(`${WITH_QUERY}&code=`)).toBe(true)
  })

  it('A-05 an omitted redirect_uri with one registered goes to that one; the token request may omit it too (AC-05)', async () => {
    const browser = new FormBrowser(gateway.url)
    const done = await loginAndConsent(browser, await browser.get(authorizeUrl({ client_id: 'stateless', redirect_uri: undefined })), ALICE)
    expect(done.location!.startsWith(`${R1}?code=`)).toBe(true)
    const code = responseParams(done.location).get('code')!
    const tokens = await postForm(gateway, '/token', { grant_type: 'authorization_code', client_id: 'stateless', code, code_verifier: VERIFIER })
    expect(tokens.status).toBe(200)
  })

  it('A-12 the code is bound to client, redirect_uri, challenge, scope, nonce, user and auth_time', async () => {
    const done = await authorizeAsAlice(new FormBrowser(gateway.url), authorizeUrl({ scope: 'openid orders:read', nonce: 'n-0S6_WzA2Mj' }))
    const code = responseParams(done.location).get('code')!
    const ctx = gateway.app.authServer!.ctx
    const record = await findAuthorizationCode(ctx, codeId(code))
    expect(record).toMatchObject({
      clientId: 'spa', redirectUri: R1, redirectUriWasSent: true, codeChallenge: CHALLENGE, codeChallengeMethod: 'S256',
      scope: ['openid', 'orders:read'], nonce: 'n-0S6_WzA2Mj', sub: 'alice',
    })
    expect(Math.abs(record!.authTime - Date.now() / 1000)).toBeLessThan(5)
    expect(record!.expiresAt - record!.issuedAt).toBe(60)
    // Another redirect URI or verifier at the token endpoint does not redeem it.
    expect((await redeem(gateway, code, { code_verifier: 'x'.repeat(43) })).body.error).toBe('invalid_grant')
    expect((await redeem(gateway, code, { redirect_uri: R2 })).body.error).toBe('invalid_grant')
    expect((await redeem(gateway, code)).status).toBe(200)
  })

  it('A-16 the user is authenticated before any code: a wrong password gets the form again (401), and no redirect', async () => {
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const res = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), username: 'alice', password: 'wrong' })
    expect(res.status).toBe(401)
    expect(res.location).toBeUndefined()
    expect(res.text).toContain('Wrong username or password.')
    expect(res.text).toContain('name="password"')
    expect(browser.cookies.has('portcullis_session')).toBe(false)
  })

  it('A-14 the login, consent and error pages carry the headers and load nothing from anywhere', async () => {
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const consentRedirect = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    const consent = await browser.get(consentRedirect.location!)
    const error = await browser.get(authorizeUrl({ client_id: 'nobody' }))
    for (const page of [login, consentRedirect, consent, error]) {
      expectPageHeaders(page)
      expect(page.headers.get('content-security-policy')).toContain('default-src \'none\'')
      expect(page.text).not.toMatch(/(src|href)\s*=\s*["']?(https?:)?\/\//i)
      expect(page.text).not.toMatch(/<script/i)
    }
    // Consent names the client (escaped) and its scopes.
    expect(consent.text).toContain('<strong>spa</strong> would like to:')
    expect(consent.text).toContain('orders:read')
    expect(consent.text).toMatch(/<button type="submit" name="decision" value="allow"/)
  })

  it('A-14 consent escapes a client name with markup in it', async () => {
    const url = `${authorizeUrl({ client_id: 'conf-basic' })}`
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(url)).location!)
    expect(login.text).toContain('Orders &lt;Web&gt;')
    expect(login.text).not.toContain('Orders <Web>')
  })

  it('A-15 the session cookie is HttpOnly and SameSite=Lax, with no Secure over http', async () => {
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const res = await browser.request('/login', {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE }).toString(),
    })
    const cookie = res.headers.getSetCookie().find((line) => line.startsWith('portcullis_session='))!
    expect(cookie).toMatch(/; HttpOnly/i)
    expect(cookie).toMatch(/; SameSite=Lax/i)
    expect(cookie).not.toMatch(/; Secure/i)
    expect(cookie).toMatch(/; Path=\//)
  })

  it('A-15 a login POST without the CSRF token, or with another browser\'s, gets a 403 page and logs no one in', async () => {
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const interaction = field(login, 'interaction')
    const missing = await browser.post('/login', { interaction, ...ALICE })
    expect(missing.status).toBe(403)
    expectPageHeaders(missing)
    const other = new FormBrowser(gateway.url)
    const otherLogin = await other.get((await other.get(authorizeUrl())).location!)
    const foreign = await browser.post('/login', { _csrf: field(otherLogin, '_csrf'), interaction, ...ALICE })
    expect(foreign.status).toBe(403)
    expect(browser.cookies.has('portcullis_session')).toBe(false)
    // The real token still works: the refusals consumed nothing.
    const ok = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction, ...ALICE })
    expect(ok.status).toBe(303)
  })

  it('A-15 a consent POST without the CSRF token is refused and the request stays answerable', async () => {
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const toConsent = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    const consent = await browser.get(toConsent.location!)
    const interaction = field(consent, 'interaction')
    expect((await browser.post('/consent', { interaction, decision: 'allow' })).status).toBe(403)
    const ok = await browser.post('/consent', { _csrf: field(consent, '_csrf'), interaction, decision: 'allow' })
    expect(ok.status).toBe(303)
    expect(responseParams(ok.location).has('code')).toBe(true)
  })

  it('A-15 a consent form answered twice: the second answer gets a page, not a second code', async () => {
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const consent = await browser.get((await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })).location!)
    const form = { _csrf: field(consent, '_csrf'), interaction: field(consent, 'interaction'), decision: 'allow' }
    expect((await browser.post('/consent', form)).status).toBe(303)
    const again = await browser.post('/consent', form)
    expect(again.status).toBe(400)
    expect(again.location).toBeUndefined()
  })

  it('A-08 the user denies → 303 to R1 with access_denied, state and iss', async () => {
    const done = await authorizeAsAlice(new FormBrowser(gateway.url), authorizeUrl(), { decision: 'deny' })
    const params = expectErrorRedirect(gateway, done, 'access_denied', { status: 303 })
    expect(params.get('state')).toBe('st-123')
  })

  it('consent remembered per user and client skips the page next time; more scope asks again; prompt=consent always asks', async () => {
    const browser = new FormBrowser(gateway.url)
    await authorizeAsAlice(browser, authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb' }), { remember: true })
    const again = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1:4000/cb' }))
    expect(again.status).toBe(302)
    expect(again.location!.startsWith('http://127.0.0.1:4000/cb?code=')).toBe(true)
    const more = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb', scope: 'orders:read orders:write' }))
    expect(more.location).toContain('/consent?interaction=')
    const forced = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb', prompt: 'consent' }))
    expect(forced.location).toContain('/consent?interaction=')
    // Not for another client, nor for another user.
    expect((await browser.get(authorizeUrl())).location).toContain('/consent?interaction=')
    const bob = new FormBrowser(gateway.url)
    const bobLogin = await bob.get((await bob.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb' }))).location!)
    const bobNext = await bob.post('/login', { _csrf: field(bobLogin, '_csrf'), interaction: field(bobLogin, 'interaction'), ...BOB })
    expect(bobNext.location).toContain('/consent?interaction=')
  })

  it('A-16 prompt=login asks for the password again even with a session; prompt=none then answers without a page', async () => {
    const browser = new FormBrowser(gateway.url)
    await authorizeAsAlice(browser, authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb' }), { remember: true })
    const before = browser.cookies.get('portcullis_session')
    const forced = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb', prompt: 'login' }))
    expect(forced.location).toContain('/login?interaction=')
    const done = await loginAndConsent(browser, forced, ALICE)
    expect(done.location!.startsWith('http://127.0.0.1/cb?code=')).toBe(true)
    // A new login is a new session (no fixation).
    expect(browser.cookies.get('portcullis_session')).not.toBe(before)
    const silent = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb', prompt: 'none' }))
    expect(silent.location!.startsWith('http://127.0.0.1/cb?code=')).toBe(true)
  })

  it('A-16 max_age older than auth_time forces a new login (max_age=0 always)', async () => {
    const browser = new FormBrowser(gateway.url)
    await authorizeAsAlice(browser, authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb' }), { remember: true })
    const fresh = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb', max_age: '3600' }))
    expect(fresh.location!.startsWith('http://127.0.0.1/cb?code=')).toBe(true)
    const zero = await browser.get(authorizeUrl({ client_id: 'native', redirect_uri: 'http://127.0.0.1/cb', max_age: '0' }))
    expect(zero.location).toContain('/login?interaction=')
  })

  it('A-07 POST /authorize behaves as GET (A-01) and answers with 303', async () => {
    const browser = new FormBrowser(gateway.url)
    const query = new URL(authorizeUrl(), gateway.url).searchParams
    const res = await browser.post('/authorize', Object.fromEntries(query))
    expect(res.status).toBe(303)
    expect(res.location).toContain('/login?interaction=')
  })

  it('an unknown or expired interaction id gets a page, not a crash', async () => {
    const res = await new FormBrowser(gateway.url).get('/login?interaction=nope')
    expect(res.status).toBe(400)
    expectPageHeaders(res)
    expect((await new FormBrowser(gateway.url).get('/consent?interaction=nope')).status).toBe(400)
  })
})

describe('codes over time and login throttling', () => {
  it('A-13 a code expires after authorization_code.ttl (here 5 s): invalid_grant after', async (context) => {
    const clock = testClock()
    const gateway = await start(context, { authorization_code: { ttl: '5s' } }, { now: clock.now })
    const done = await authorizeAsAlice(new FormBrowser(gateway.url))
    const code = responseParams(done.location).get('code')!
    clock.advance(6000)
    expect((await redeem(gateway, code)).body.error).toBe('invalid_grant')
  })

  it('A-16 max_age: a session older than max_age must log in again', async (context) => {
    const clock = testClock()
    const gateway = await start(context, {}, { now: clock.now })
    const browser = new FormBrowser(gateway.url)
    await authorizeAsAlice(browser, authorizeUrl(), { remember: true })
    expect((await browser.get(authorizeUrl({ max_age: '60' }))).location!.startsWith(`${R1}?code=`)).toBe(true)
    clock.advance(61_000)
    expect((await browser.get(authorizeUrl({ max_age: '60' }))).location).toContain('/login?interaction=')
  })

  it('login brute force is throttled like the token endpoint: after 3 failures even the right password gets 429 with Retry-After', async (context) => {
    const gateway = await start(context)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const form = (password: string) => ({ _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), username: 'alice', password })
    for (let i = 0; i < 3; i++) expect((await browser.post('/login', form(`wrong-${i}`))).status).toBe(401)
    const locked = await browser.post('/login', form(ALICE.password))
    expect(locked.status).toBe(429)
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(0)
    expect(locked.text).toContain('Too many failed sign-in attempts')
    expect(browser.cookies.has('portcullis_session')).toBe(false)
  })

  it('no user enumeration: an unknown user and a wrong password get the same status and message', async (context) => {
    const gateway = await start(context)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const attempt = (username: string) => browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), username, password: 'nope-nope' })
    const unknown = await attempt('mallory')
    const wrong = await attempt('alice')
    expect(unknown.status).toBe(wrong.status)
    const message = (page: PageResponse) => /<p role="alert"[^>]*>([^<]*)</.exec(page.text)?.[1]
    expect(message(unknown)).toBe(message(wrong))
  })

  it('A-08 overload: past 300 new sign-in requests a minute from one address → temporarily_unavailable, and no more rows', async (context) => {
    const gateway = await start(context)
    const browser = new FormBrowser(gateway.url)
    for (let i = 0; i < 300; i++) expect((await browser.get(authorizeUrl())).location).toContain('/login?interaction=')
    const refused = await browser.get(authorizeUrl())
    expectErrorRedirect(gateway, refused, 'temporarily_unavailable')
    const interactions = await gateway.app.authServer!.ctx.store.list('interaction')
    expect(interactions).toHaveLength(300)
    // The device page starts interactions too, and says so in a page.
    const page = await browser.get('/device')
    expect(page.status).toBe(429)
    expect(Number(page.headers.get('retry-after'))).toBeGreaterThan(0)
    expectPageHeaders(page)
  })

  it('A-15 the Secure attribute is set when the issuer is https', async (context) => {
    const https = await startAuthServerGateway({ ...setup(), issuer: 'https://login.example.com' })
    context.onTestFinished(() => https.close())
    const browser = new FormBrowser(https.url)
    const login = await browser.get((await browser.get(authorizeUrl())).location!)
    const res = await browser.request('/login', {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE }).toString(),
    })
    expect(res.headers.getSetCookie().find((line) => line.startsWith('portcullis_session='))).toMatch(/; Secure/i)
  })
})
